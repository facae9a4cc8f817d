; every directive and operand form
.equ N, 4
.equ BIG, 0xffffffff
.inq 3, 5
.outq 5, 7
.task 0, main, active
.task 1, on_data, color=5
.task 2, @4, blocked
.align 16
.data tab, i32, tab, N, -1, BIG
.data h16, i16, -32768, 65535
.space v, fp32, N
.data f, fp32, 1.5, -0.0, inf, nan, -1e-3, +2, 0x7f800000
.data b, bf16, 1.0, 3.0e38
.data c, cb16, 0.25
.org 0x800
.space w, fp16, 8
main:
    li r1, N+2
    lif r2, -0.5
    addi r3, r1, -7
    ld32 r4, [r1+tab]
    st16 [r2-4], r4
    beq r1, r2, main
    jmp @0
on_data: exit
    dmem d0, v, N, 1
    dmem d43, w+2, 8, -2048
    dfin d1, 5, 4
    dfout d2, 7, 1
    dlen d0, r1
    daddb d0, -4
    vfmac.fp16.fp32 d0, d1, d2, d3, async=7, done=activate:2
    vaxpy.bf16.fp32 d0, d1, r2
    vcvt.fp32.cb16 d0, d1 // to cb16
    vsum.fp32 r5, d0
    vsel.fp32 d0, d1, d2, d3, async=0, done=unblock:1
    filt 5, r1, r2
    fcnt 5, r3
    halt
