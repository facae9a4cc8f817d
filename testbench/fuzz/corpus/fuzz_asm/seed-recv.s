.inq 0, 2
.task 0, main, active
.space buf, fp32, 4
.data c, cb16, 1.5
main:
    dfin d0, 2, 4
    dmem d1, buf, 4, 1
    vmov.fp32 d1, d0
    halt
