.task 0, main, active
.space a, cb16, 4
.space c, cb16, 4
main:
    dmem d0, a, 4, 1
    dmem d1, c, 4, 1
    vexp.cb16 d1, d0
    halt
