.task 0, start, active
start:
a: b:   nop
loop:   addi r1, r1, 1
        blt r1, r2, loop
        activate 0
        block 0
        unblock 0
        halt
