.task 0, main, active
.outq 0, 0
.space buf, bf16, 4
main:
    dmem d0, buf, 4, 1
    dfout d1, 0, 4
    vmov.bf16 d1, d0
    halt
