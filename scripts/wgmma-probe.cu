// wgmma-probe.cu: checks the sw128 layouts and descriptors of kernels/wgmma.cuh on the GPU against
// plain products on the host (a diagnostic for kernels/attention_wgmma.cu; not part of the build).
//   nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -I. -o /tmp/probe scripts/wgmma-probe.cu
// S = Q K^T (Q [64][128], K [64][128], both K-major) and O = P V (P [64][64] in registers, V
// [64][128] read N-major), O with the two possible (LBO, SBO) orders for V.
#include <cuda_bf16.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/mma.cuh"
#include "kernels/wgmma.cuh"

__global__ void probe(const bf16_t *Q, const bf16_t *K, const bf16_t *P, const bf16_t *V, float *S,
                      float *O, int swap) {
    __shared__ __align__(1024) unsigned char sQ[64 * 256], sK[64 * 256], sV[64 * 256];
    const int t = threadIdx.x, warp = t / 32, lane = t % 32, gid = lane / 4, tig = lane % 4;
    for (int x = t; x < 64 * 16; x += 128) {
        const int i = x / 16, c = x % 16;
        *(uint4 *)(sQ + sw128_chunk(64, i, c)) = *(const uint4 *)(Q + i * 128 + c * 8);
        *(uint4 *)(sK + sw128_chunk(64, i, c)) = *(const uint4 *)(K + i * 128 + c * 8);
        *(uint4 *)(sV + sw128_chunk(64, i, c)) = *(const uint4 *)(V + i * 128 + c * 8);
    }
    fence_proxy_async();
    __syncthreads();
    const uint32_t aQ = __cvta_generic_to_shared(sQ), aK = __cvta_generic_to_shared(sK),
                   aV = __cvta_generic_to_shared(sV);
    float s[32], o[64];
    for (int i = 0; i < 64; i++) o[i] = 0;
    wgmma_fence();
    for (int ks = 0; ks < 8; ks++) {
        const uint32_t off = (ks >> 2) * 64 * 128 + (ks & 3) * 32;
        wgmma_ss_n64(s, wgmma_desc(aQ + off, 16, 1024), wgmma_desc(aK + off, 16, 1024), ks > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_regs<32>(s);
    const int r0 = warp * 16 + gid;
    for (int j = 0; j < 8; j++)
        for (int c = 0; c < 4; c++)
            S[(r0 + (c >> 1) * 8) * 64 + 8 * j + 2 * tig + (c & 1)] = s[4 * j + c];
    uint32_t a[4][4];
    for (int kk = 0; kk < 4; kk++)
        for (int q = 0; q < 4; q++) {
            const int row = r0 + (q & 1) * 8, col = 16 * kk + (q >> 1) * 8 + 2 * tig;
            a[kk][q] = pack_bf16(__bfloat162float(P[row * 64 + col]),
                                 __bfloat162float(P[row * 64 + col + 1]));
        }
    wgmma_fence();
    for (int kk = 0; kk < 4; kk++)
        wgmma_rs_n128_tb(o, a[kk],
                         swap ? wgmma_desc(aV + kk * 2048, 1024, 64 * 128)
                              : wgmma_desc(aV + kk * 2048, 64 * 128, 1024));
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_regs<64>(o);
    for (int j = 0; j < 16; j++)
        for (int c = 0; c < 4; c++)
            O[(r0 + (c >> 1) * 8) * 128 + 8 * j + 2 * tig + (c & 1)] = o[4 * j + c];
}

int main(void) {
    const int nq = 64 * 128, np = 64 * 64;
    bf16_t *hQ = (bf16_t *)malloc(nq * 2), *hK = (bf16_t *)malloc(nq * 2),
           *hP = (bf16_t *)malloc(np * 2), *hV = (bf16_t *)malloc(nq * 2);
    srand(1);
    for (int i = 0; i < nq; i++) {
        hQ[i] = __float2bfloat16((rand() % 17 - 8) / 8.0f);
        hK[i] = __float2bfloat16((rand() % 17 - 8) / 8.0f);
        hV[i] = __float2bfloat16((rand() % 17 - 8) / 8.0f);
    }
    for (int i = 0; i < np; i++) hP[i] = __float2bfloat16((rand() % 17 - 8) / 8.0f);
    bf16_t *dQ, *dK, *dP, *dV;
    float *dS, *dO;
    cudaMalloc(&dQ, nq * 2), cudaMalloc(&dK, nq * 2), cudaMalloc(&dP, np * 2);
    cudaMalloc(&dV, nq * 2), cudaMalloc(&dS, np * 4), cudaMalloc(&dO, nq * 4);
    cudaMemcpy(dQ, hQ, nq * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dK, hK, nq * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dP, hP, np * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dV, hV, nq * 2, cudaMemcpyHostToDevice);
    float *S = (float *)malloc(np * 4), *O = (float *)malloc(nq * 4);
    for (int swap = 0; swap < 2; swap++) {
        cudaMemset(dS, 0, np * 4), cudaMemset(dO, 0, nq * 4);
        probe<<<1, 128>>>(dQ, dK, dP, dV, dS, dO, swap);
        cudaError_t rc = cudaDeviceSynchronize();
        if (rc != cudaSuccess) {
            printf("probe swap=%d: %s\n", swap, cudaGetErrorString(rc));
            return 1;
        }
        cudaMemcpy(S, dS, np * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(O, dO, nq * 4, cudaMemcpyDeviceToHost);
        double es = 0, eo = 0;
        for (int i = 0; i < 64; i++)
            for (int j = 0; j < 64; j++) {
                double ref = 0;
                for (int d = 0; d < 128; d++)
                    ref += (double)__bfloat162float(hQ[i * 128 + d]) *
                           __bfloat162float(hK[j * 128 + d]);
                es = fmax(es, fabs(ref - S[i * 64 + j]));
            }
        for (int i = 0; i < 64; i++)
            for (int j = 0; j < 128; j++) {
                double ref = 0;
                for (int c = 0; c < 64; c++)
                    ref += (double)__bfloat162float(hP[i * 64 + c]) *
                           __bfloat162float(hV[c * 128 + j]);
                eo = fmax(eo, fabs(ref - O[i * 128 + j]));
            }
        printf("wgmma probe: S = Q K^T max abs err %.3g; O = P V (V desc %s) max abs err %.3g\n",
               es, swap ? "LBO=1024 SBO=rows*128" : "LBO=rows*128 SBO=1024", eo);
    }
    return 0;
}
