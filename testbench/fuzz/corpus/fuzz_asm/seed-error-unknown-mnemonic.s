.task 0, main, active
main:
    vadx.fp32 d0, d1, d2
