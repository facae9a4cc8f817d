.task 0, main, active
.outq 0, 0
.inq 0, 2
.space v, fp32, 2
.space sum, fp32, 2
main:
    dmem d0, v, 2, 1
    dmem d1, sum, 2, 1
    vmov.fp32 d1, d0
    dfout d2, 0, 2
    vmov.fp32 d2, d1
    dfin d3, 2, 2
    vmov.fp32 d1, d3
    halt
