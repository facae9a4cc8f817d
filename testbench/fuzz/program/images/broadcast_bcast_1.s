.task 0, main, active
.inq 0, 0
.space buf, bf16, 4
main:
    dmem d0, buf, 4, 1
    dfin d1, 0, 4
    vmov.bf16 d0, d1
    halt
