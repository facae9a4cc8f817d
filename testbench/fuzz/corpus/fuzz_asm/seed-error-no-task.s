main: halt
