.task 0, main, active
.inq 0, 0
.outq 0, 1
main:
    li r0, 0
    li r1, 2
    dfin d0, 0, 16
    dfout d1, 1, 16
loop:
    vmov.fp32 d1, d0
    addi r1, r1, -1
    bne r1, r0, loop
    halt
