.task 0, main, active
.outq 0, 0
.space x, fp32, 4
main:
    li r0, 0
    li r1, 1
    dfout d0, 0, 4
    dmem d1, x, 4, 1
loop:
    vmov.fp32 d0, d1
    addi r1, r1, -1
    bne r1, r0, loop
    halt
