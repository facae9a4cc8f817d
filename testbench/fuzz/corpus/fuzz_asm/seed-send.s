.outq 0, 2
.task 0, main, active
.space buf, fp32, 4
.data n, i16, 1, 2, 3
.data h, fp16, 0.5, -2
main:
    dfout d0, 2, 4
    dmem d1, buf, 4, 1
    vmov.fp32 d0, d1
    halt
