.task 0, main, active
.inq 0, 0
.inq 1, 1
.outq 0, 2
.space v, fp32, 2
.space sum, fp32, 2
main:
    dmem d0, v, 2, 1
    dmem d1, sum, 2, 1
    vmov.fp32 d1, d0
    dfin d2, 0, 2
    vadd.fp32 d1, d2, d1
    dfin d3, 1, 2
    vadd.fp32 d1, d3, d1
    dfout d4, 2, 2
    vmov.fp32 d4, d1
    halt
