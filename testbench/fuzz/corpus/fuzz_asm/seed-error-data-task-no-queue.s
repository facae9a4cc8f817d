.task 0, main, color=3
main: halt
