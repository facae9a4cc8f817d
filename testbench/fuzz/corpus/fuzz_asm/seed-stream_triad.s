.task 0, main, active
.align 16
.space src0, fp16, 64
.align 16
.space src1, fp16, 67
.align 16
.space dest, fp16, 70
.align 4
.space cycles, i32, 1
main:
    dmem d0, src0+0, 64, 1
    dmem d1, src1+6, 64, 1
    dmem d2, dest+12, 64, 1
    lif r2, 0x42280000
    li r0, 0
    li r1, 100
warm:
    vfmacs.fp16 d2, d0, d1, r2
    addi r1, r1, -1
    bne r1, r0, warm
    tsc r3
    vfmacs.fp16 d2, d0, d1, r2
    tsc r4
    sub r5, r4, r3
    st32 [r0+cycles], r5
    halt
