// Helpers shared by the cuda_fast kernels: PTX wrappers (cp.async, ldmatrix / stmatrix, bf16 and tf32 mma.sync,
// ex2) and the host side's argument checks. Everything is in an anonymous namespace: each source gets its own copy.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

namespace {

// ---------------------------------------------------------------------------------------------------------------
// PTX helpers
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared at a shared-memory address (`smem_addr`); pred false: zeros, nothing read
__device__ __forceinline__ void cp_async16_zfill(uint32_t dst, const void* src, bool pred) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(pred ? 16 : 0));
}

// the same, to a generic pointer into shared memory
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool pred) {
    cp_async16_zfill(smem_addr(dst), src, pred);
}

// 16 bytes global -> shared at a shared-memory address, always copying
__device__ __forceinline__ void cp_async16_to(uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

// the inverse of ldsm_x4: register i of each lane to matrix i, lanes 8i..8i+7 giving matrix i's row addresses
__device__ __forceinline__ void stsm_x4(void* p, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr(p)), "r"(r0),
                 "r"(r1), "r"(r2), "r"(r3) : "memory");
}

// stsm_x4 transposed: matrix i stored column by column, lanes 8i..8i+7 giving the addresses of its columns
__device__ __forceinline__ void stsm_x4_t(void* p, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr(p)),
                 "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}

// c += a (16x16, row) * b (16x8, col), bf16 inputs, fp32 accumulators
__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// fp32 rounded to the nearest tf32 (10 mantissa bits), as the bits of an mma operand
__device__ __forceinline__ uint32_t tf32(float x) {
    uint32_t y;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(y) : "f"(x));
    return y;
}

// what x's nearest tf32 value `hi` (bits from `tf32`; an mma reads its top 19) leaves, itself as a tf32 operand: the
// two products sum to x's to about 2^-22 relative (one operand of a product split in two mma)
__device__ __forceinline__ uint32_t tf32_rest(float x, uint32_t hi) {
    return tf32(x - __uint_as_float(hi & 0xFFFFE000u));
}

// c += a (16x8, row) * b (8x8, col), tf32 inputs (from `tf32`), fp32 accumulators
__device__ __forceinline__ void mma_tf32(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ float2 unpack_bf16(uint32_t x) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&x));
}

// barrier `id` (1..15) of `nthreads` threads (a multiple of 32): the warps of a CTA that are still running
__device__ __forceinline__ void bar_sync(int id, int nthreads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(nthreads) : "memory");
}

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// ---------------------------------------------------------------------------------------------------------------
// host side
int fail(char* err, int errlen, const char* msg) {
    if (err != nullptr && errlen > 0) snprintf(err, errlen, "%s", msg);
    return 1;
}

bool on_device(const void* p, int device) {
    cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged) && attr.device == device;
}

struct Ptr { const void* p; const char* name; int align; bool required; };

// 0 when every pointer is null-but-optional or aligned memory of the current device; else 1 with the reason in err
int check_pointers(const char* fn, const Ptr* ptrs, int n, char* err, int errlen) {
    char msg[512];
    int device = -1;
    if (cudaGetDevice(&device) != cudaSuccess) {
        snprintf(msg, sizeof msg, "%s: no current CUDA device", fn);
        return fail(err, errlen, msg);
    }
    for (int i = 0; i < n; ++i) {
        const Ptr& p = ptrs[i];
        if (p.p == nullptr) {
            if (!p.required) continue;
            snprintf(msg, sizeof msg, "%s: %s is null", fn, p.name);
            return fail(err, errlen, msg);
        }
        if (reinterpret_cast<uintptr_t>(p.p) % p.align != 0) {
            snprintf(msg, sizeof msg, "%s: %s is not %d-byte aligned", fn, p.name, p.align);
            return fail(err, errlen, msg);
        }
        if (!on_device(p.p, device)) {
            snprintf(msg, sizeof msg, "%s: %s is not memory of the current CUDA device %d", fn, p.name, device);
            return fail(err, errlen, msg);
        }
    }
    return 0;
}

}  // namespace
