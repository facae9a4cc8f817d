.inq 0, 0
.task 0, init, active
.task 1, reduce
.task 2, onx, color=0
.outq 0, 3
.space y, fp16, 4
.space A, fp16, 8
init:
    dmem d0, A, 4, 1
    dmem d1, y, 4, 1
    li r0, 0
    li r1, 0
    li r2, 2
    li r3, 1
    li r5, A
    vfill.fp16 d1, r0
    exit
onx:
    vaxpy.fp16.fp16 d1, d0, r15
    daddb d0, 8
    addi r1, r1, 1
    bne r1, r2, onx_done
    li r1, 0
    dbase d0, r5
    block 2
    activate 1
onx_done:
    exit
reduce:
    dfout d2, 3, 4
    vmov.fp16 d2, d1
    addi r3, r3, -1
    beq r3, r0, finish
    vfill.fp16 d1, r0
    unblock 2
    exit
finish:
    halt
