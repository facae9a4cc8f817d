.task 0, main, active
.outq 0, 0
.space v, fp32, 4
.space sum, fp32, 4
main:
    dmem d0, v, 4, 1
    dmem d1, sum, 4, 1
    vmov.fp32 d1, d0
    dfout d2, 0, 4
    vmov.fp32 d2, d1
    halt
