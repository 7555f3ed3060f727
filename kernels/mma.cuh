// mma.cuh: the warp-level tensor-core pieces the bf16 kernels share (attention.cu, delta_tc.cu):
// mma.sync m16n8k16 with fp32 accumulators, ldmatrix fragment loads, bf16 packing, cp.async.
//
// Fragment layout of mma.m16n8k16 (lane = 4 gid + tig): A (16 x 16, row-major) a[0] = rows gid,
// cols 2 tig, 2 tig + 1; a[1] = row gid + 8; a[2], a[3] = the same rows at cols + 8. B (16 x 8)
// b0 = k rows 2 tig, 2 tig + 1 of col gid; b1 = k rows + 8. C (16 x 8) c[0], c[1] = row gid, cols
// 2 tig, 2 tig + 1; c[2], c[3] = row gid + 8. So the C tiles of two adjacent n8 blocks, packed to
// bf16, are the A fragment of one k16 block (how a product feeds the next without shared memory).
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16_t;

// c += a b
__device__ __forceinline__ void mma_bf16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// fp32 rounded to tf32 (nearest, ties away), as mma's .tf32 operands take it
__device__ __forceinline__ uint32_t to_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// d += a b with mma.m16n8k8 on tf32 operands, fp32 accumulators. Fragments (lane = 4 gid + tig):
// A (16 x 8, row-major) a[0] = (gid, tig), a[1] = (gid + 8, tig), a[2], a[3] = the same at col
// tig + 4; B (8 x 8) b[0] = (k tig, col gid), b[1] = (k tig + 4, col gid); D as mma_bf16's C.
__device__ __forceinline__ void mma_tf32(float *d, const uint32_t *a, const uint32_t *b) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// lo in the low half (the lower column index of a fragment pair)
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

// Four 8 x 8 bf16 matrices from shared memory; lane L gives the address of row L % 8 of matrix
// L / 8. ldsm_*: from a shared-window address (smem_u32 once, offsets added as immediates: no
// address arithmetic a load in unrolled loops); ldmatrix_*: from a generic pointer.
__device__ __forceinline__ unsigned smem_u32(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void ldsm_x4(uint32_t *r, unsigned a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t *r, unsigned a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t *r, const bf16_t *p) {
    ldsm_x4(r, smem_u32(p));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t *r, const bf16_t *p) {
    ldsm_x4_trans(r, smem_u32(p));
}

// Fragment addresses for a warp's lane (ld: row stride in elements):
//   A of the 16 x 16 block at (r0, c0) of a row-major M x K tile, and B of two n8 blocks from a
//   K-major tile ([k][n], ldmatrix_x4_trans): r[0], r[1] = b0, b1 of cols c0..c0+7,
//   r[2], r[3] = of c0+8..c0+15.
__device__ __forceinline__ const bf16_t *frag_a(const bf16_t *base, int ld, int r0, int c0,
                                                int lane) {
    return base + (size_t)(r0 + (lane & 15)) * ld + c0 + (lane >> 4) * 8;
}
//   B of two n8 blocks (n0..n0+15) and the k16 block at k0 from an N-major tile ([n][k],
//   ldmatrix_x4): r[0], r[1] = b0, b1 of n0..n0+7; r[2], r[3] = of n0+8..n0+15.
__device__ __forceinline__ const bf16_t *frag_b_nk(const bf16_t *base, int ld, int n0, int k0,
                                                   int lane) {
    return base + (size_t)(n0 + (lane >> 4) * 8 + (lane & 7)) * ld + k0 + ((lane >> 3) & 1) * 8;
}

// acc[2 np] and acc[2 np + 1] (np < NP) += A(kb) B(kb, np) summed over kb < KB, with A(kb) a
// fragment in registers (afrag(kb) -> const uint32_t[4]) and B(kb, np) two n8 blocks loaded by
// ldmatrix (.trans when TRANS) from baddr(kb, np). The asm statements are volatile, so the compiler
// keeps them in source order: the loads are issued LA steps ahead of the products that use them,
// or every product would wait for its own load.
template <int KB, int NP, bool TRANS, typename AF, typename BA>
__device__ __forceinline__ void mma_sweep(float (*acc)[4], AF afrag, BA baddr) {
    constexpr int Q = KB * NP, LA = 3;
    uint32_t fb[4][4];
#pragma unroll
    for (int p = 0; p < LA && p < Q; p++) {
        if (TRANS)
            ldmatrix_x4_trans(fb[p], baddr(p / NP, p % NP));
        else
            ldmatrix_x4(fb[p], baddr(p / NP, p % NP));
    }
#pragma unroll
    for (int p = 0; p < Q; p++) {
        if (p + LA < Q) {
            if (TRANS)
                ldmatrix_x4_trans(fb[(p + LA) & 3], baddr((p + LA) / NP, (p + LA) % NP));
            else
                ldmatrix_x4(fb[(p + LA) & 3], baddr((p + LA) / NP, (p + LA) % NP));
        }
        const uint32_t *a = afrag(p / NP);
        mma_bf16(acc[2 * (p % NP)], a, fb[p & 3][0], fb[p & 3][1]);
        mma_bf16(acc[2 * (p % NP) + 1], a, fb[p & 3][2], fb[p & 3][3]);
    }
}

// 16 bytes global -> shared without passing through registers (sm_80+).
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(gmem));
}
// The same, or 16 zero bytes when !valid (gmem must still be a mapped address).
__device__ __forceinline__ void cp_async16_zfill(void *smem, const void *gmem, bool valid) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(gmem),
                 "r"(valid ? 16 : 0));
}
// The same for G = 4, 8 or 16 bytes (4 and 8 exist only as .ca, through L1).
template <int G>
__device__ __forceinline__ void cp_async_zfill(void *smem, const void *gmem, bool valid) {
    if constexpr (G == 16) {
        cp_async16_zfill(smem, gmem, valid);
    } else {
        const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(a), "l"(gmem), "n"(G),
                     "r"(valid ? G : 0));
    }
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
