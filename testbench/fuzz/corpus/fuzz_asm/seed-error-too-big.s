.task 0, main, active
.space big, fp32, 20000
main: halt
