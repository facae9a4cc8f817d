.task 0, m, active
m: add r1, r2
    li r1, 0x1ffffffff
    dmem d44, 0, 1, 1
