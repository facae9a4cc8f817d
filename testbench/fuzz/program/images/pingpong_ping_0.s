.task 0, main, active
.outq 0, 0
.inq 0, 1
.space buf, fp32, 16
.space echo, fp32, 16
main:
    li r0, 0
    li r1, 2
    dfout d0, 0, 16
    dfin d1, 1, 16
    dmem d2, buf, 16, 1
    dmem d3, echo, 16, 1
loop:
    vmov.fp32 d0, d2, async=0
    vmov.fp32 d3, d1
    addi r1, r1, -1
    bne r1, r0, loop
    halt
