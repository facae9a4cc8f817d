.task 0, main, active
.inq 0, 0
.inq 1, 2
.inq 2, 3
.space v, fp32, 4
.space sum, fp32, 4
main:
    dmem d0, v, 4, 1
    dmem d1, sum, 4, 1
    vmov.fp32 d1, d0
    dfin d2, 0, 4
    vadd.fp32 d1, d2, d1
    dfin d3, 2, 4
    vadd.fp32 d1, d3, d1
    dfin d4, 3, 4
    vadd.fp32 d1, d4, d1
    halt
