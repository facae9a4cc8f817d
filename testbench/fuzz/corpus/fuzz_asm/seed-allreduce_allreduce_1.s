.task 0, main, active
.inq 0, 0
.outq 0, 1
.inq 1, 2
.space v, fp32, 2
.space sum, fp32, 2
main:
    dmem d0, v, 2, 1
    dmem d1, sum, 2, 1
    vmov.fp32 d1, d0
    dfin d2, 0, 2
    vadd.fp32 d1, d2, d1
    dfout d3, 1, 2
    vmov.fp32 d3, d1
    dfin d4, 2, 2
    vmov.fp32 d1, d4
    halt
