// KDA chunked forward (inference prefill) for sm_90a / sm_100a: bf16 q/k/v, K = V = 128, chunks of 16 tokens.
//
// Two kernels (plain CUDA C++, no torch headers; the C entry point kda_fwd is loaded through ctypes):
//   kda_intra_fwd_kernel  grid (ceil(NT / 4), HV), one warp per 16-token chunk of one v-head (chunk-parallel):
//       gate activation + in-chunk cumsum (log2 units), l2norm, beta activation,
//       Aqk = scale (q e^{G_i - G_0}) (k e^{G_0 - G_j})^T (j <= i),  L = beta_i (k e^{G_i - G_0}) (k e^{G_0 - G_j})^T (j < i),
//       Akk = (I + L)^-1 by fp32 forward substitution,  w = Akk diag(beta) (k e^{G}),  u = Akk diag(beta) v,
//       qg = scale q e^{G},  kg = k e^{G_last - G},  decay = e^{G_last}.
//       The anchor is the chunk's first token (never a later one: outputs stay causal bit for bit). A chunk whose
//       in-chunk decay range could overflow the anchored factors takes an exact per-element path instead.
//   kda_state_fwd_kernel  grid (N * V / BV, HV), one warp per 16 state columns (head-parallel recurrence):
//       per chunk: v_new = u - w S,  o = qg S + Aqk v_new,  S <- diag(decay) S + kg^T v_new,
//       with S^T held in fp32 mma accumulators (its bf16 copy is the A operand of the next products).
// Intermediates live in chunk-padded, head-major workspaces ([HV, NT, 16, 128]); rows past a sequence end are zero.
// With `pieces` > 1 (sequences of one length, the wgmma recurrence) each sequence's chunks are cut into pieces: the
// recurrence over piece p runs on a second stream beside the intra kernel over piece p + 1 (`launch_pieces`).
// A third kernel, kda_state64_fwd_kernel (entry point kda_state64_fwd, sm_90a; backend sm90_v2, opt-in), walks the
// recurrence over 64-token chunks on wgmma from the token-major outputs of Triton's intra forward.
#include <cmath>
#include <mutex>

#include "common.cuh"

// the C ABI's argument block (mirrored by cuda_fast.sm90.FwdArgs)
struct FwdArgs {
    const __nv_bfloat16* q;       // [TT, H, K]
    const __nv_bfloat16* k;       // [TT, H, K]
    const __nv_bfloat16* v;       // [TT, HV, V]
    const void* g;                // [TT, HV, K] bf16 or fp32
    const void* beta;             // [TT, HV] bf16 or fp32
    const float* A_log;           // [HV] or null
    const float* dt_bias;         // [HV * K] or null
    const float* h0;              // [N, HV, K, V] (V-first: [N, HV, V, K]) or null
    const int64_t* cu_seqlens;    // [N + 1]
    const int32_t* chunk_indices; // [NT, 2]: (sequence, chunk within it)
    const int64_t* chunk_offsets; // [N + 1]: first chunk of each sequence
    __nv_bfloat16* o;             // [TT, HV, V]
    float* ht;                    // [N, HV, K, V] (V-first: [N, HV, V, K]) or null
    __nv_bfloat16* qg;            // workspace [HV, NT, 16, K]
    __nv_bfloat16* kg;            // workspace [HV, NT, 16, K]
    __nv_bfloat16* w;             // workspace [HV, NT, 16, K]
    __nv_bfloat16* u;             // workspace [HV, NT, 16, V]
    __nv_bfloat16* aqk;           // workspace [HV, NT, 16, 16]
    float* decay;                 // workspace [HV, NT, K]
    float* hs;                    // [N, HV, K, V] the state between pieces (pieces > 1), else null
    const int32_t* seq_order;     // [N] or null: the recurrence's CTAs of rank r take sequence seq_order[r] (longest
                                  // first, so the long chains start before the short ones; `state_cta`), null: r
    int64_t N, TT, NT, H, HV, K, V;
    int64_t chunk_lo, chunk_hi;   // pieces > 1: the chunks [lo, hi) of every sequence a launch covers (set by `kda_fwd`)
    float scale, lower_bound, beta_scale;
    float taper;                  // pieces > 1: each piece's size over the one before it (1: equal pieces)
    int32_t gate;                 // 0: g is the log decay; 1: -exp(A_log) softplus(g + dt_bias); 2: lb sigmoid(...)
    int32_t l2norm, beta_sigmoid, g_fp32, beta_fp32, v_first, block_v;
    int32_t state_wgmma;          // 1: the recurrence on wgmma (`kda_state_fwd_wgmma_kernel`, block_v 64)
    int32_t pieces;               // > 1: each sequence's chunks in that many pieces, the recurrence over piece p beside
                                  // the intra stage over piece p + 1 (equal-length sequences, wgmma; `kda_fwd`)
};

// the argument block of kda_state64_fwd (mirrored by cuda_fast.sm90_v2.State64Args): the recurrence over 64-token
// chunks on the intra stage's token-major outputs (triton_kda.wy.IntraOut of Triton's intra forward, BT = 64)
struct State64Args {
    const __nv_bfloat16* qg;      // [TT, HV, K]: scale q e^{G}
    const __nv_bfloat16* kg;      // [TT, HV, K]: k e^{G_last - G}
    const __nv_bfloat16* w;       // [TT, HV, K]
    const __nv_bfloat16* u;       // [TT, HV, V]
    const __nv_bfloat16* aqk;     // [TT, HV, 64]: zero above the diagonal
    const float* gl;              // [NT, HV, K]: G of each chunk's last token (log2 units)
    const float* h0;              // [N, HV, K, V] (V-first: [N, HV, V, K]) or null
    const int64_t* cu_seqlens;    // [N + 1]
    const int64_t* chunk_offsets; // [N + 1]: first 64-token chunk of each sequence
    __nv_bfloat16* o;             // [TT, HV, V]
    float* ht;                    // [N, HV, K, V] (V-first: [N, HV, V, K]) or null
    int64_t N, TT, NT, HV;
    int32_t v_first;
    int32_t wgs;                  // consumer warpgroups per CTA: 1, 2, or 0 (2 where one-warpgroup CTAs outnumber the SMs)
};

// the argument block of kda_intra64_fwd (mirrored by cuda_fast.sm90_v2.Intra64Args): the intra stage over 64-token
// chunks, writing triton_kda.wy.IntraOut's qg, kg, w, u, Aqk and gl as Triton's intra forward does at BT = 64
struct Intra64Args {
    const __nv_bfloat16* q;       // [TT, H, K]
    const __nv_bfloat16* k;       // [TT, H, K]
    const __nv_bfloat16* v;       // [TT, HV, V]
    const void* g;                // [TT, HV, K] bf16 or fp32
    const void* beta;             // [TT, HV] bf16 or fp32
    const float* A_log;           // [HV] or null
    const float* dt_bias;         // [HV * K] or null
    const int64_t* cu_seqlens;    // [N + 1]
    const int32_t* chunk_indices; // [NT, 2]: (sequence, 64-token chunk within it)
    __nv_bfloat16* qg;            // [TT, HV, K]: scale q e^{G}
    __nv_bfloat16* kg;            // [TT, HV, K]: k e^{G_last - G}
    __nv_bfloat16* w;             // [TT, HV, K]
    __nv_bfloat16* u;             // [TT, HV, V]
    __nv_bfloat16* aqk;           // [TT, HV, 64]: zero above the diagonal
    float* gl;                    // [NT, HV, K]: G of each chunk's last token (log2 units)
    int64_t TT, NT, H, HV, K, V;
    float scale, lower_bound, beta_scale;
    int32_t gate, l2norm, beta_sigmoid, g_fp32, beta_fp32;  // as FwdArgs
};

namespace {

constexpr int D = 128;            // K = V
constexpr int BT = 16;            // chunk size
constexpr int PAD = D + 8;        // bf16 row stride of [16, 128] tiles in shared memory (conflict-free ldmatrix)
constexpr int APAD = 24;          // bf16 row stride of [16, 16] tiles
constexpr int K1_WARPS = 4;
constexpr int K2_STAGES = 4;
constexpr float LOG2E = 1.4426950408889634f;
// fast path bound: every anchored factor e^{+-(G_t - G_0)} stays below 2^115 (bf16 / fp32 overflow at 2^128)
constexpr float RANGE_MAX = 115.0f;

// ldmatrix row address of a 16x16 tile at column col0 (row stride `stride` elements):
//   A operand (rows x k) and the .trans B operand (k = rows): matrices (r0-7,c0) (r8-15,c0) (r0-7,c8) (r8-15,c8)
__device__ __forceinline__ const __nv_bfloat16* tile_a(const __nv_bfloat16* base, int stride, int col0, int lane) {
    return base + ((lane & 7) + ((lane >> 3) & 1) * 8) * stride + col0 + (lane >> 4) * 8;
}

//   B operand with n = rows, k = columns: matrices (r0-7,c0) (r0-7,c8) (r8-15,c0) (r8-15,c8) = (b0, b1) of two n-tiles
__device__ __forceinline__ const __nv_bfloat16* tile_bn(const __nv_bfloat16* base, int stride, int col0, int lane) {
    return base + ((lane & 7) + (lane >> 4) * 8) * stride + col0 + ((lane >> 3) & 1) * 8;
}

template <int GATE>
__device__ __forceinline__ float gate_act(float x, float a, float lb) {
    if constexpr (GATE == 1) {  // -a softplus(x)
        return -a * (x > 20.0f ? x : __logf(1.0f + __expf(x)));
    } else {  // lb sigmoid(a x)
        return __fdividef(lb, 1.0f + __expf(-a * x));
    }
}

__device__ __forceinline__ float load_scalar(const void* p, int64_t i, bool f32) {
    return f32 ? static_cast<const float*>(p)[i] : __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

// ---------------------------------------------------------------------------------------------------------------
// Kernel 1: chunk-parallel intra-chunk stage, in mma fragment layout: thread (g, t) = (lane / 4, lane % 4) holds rows
// g and g + 8, columns 16 kk + 2t + {0, 1, 8, 9} of q and k (the A fragments of the 8 k-steps), which are also the
// B fragments of k e^{G_0 - G} for the two 8-row n-tiles, so Aqk and L need no shared-memory staging.
// Shared memory per warp: region R (G fp32 [16, GPAD]; after the pass: v [16, 128] bf16 swizzled, L [16, 17] fp32,
// Akk diag(beta) [16, APAD] bf16), region X (k as loaded, then k e^{G}, [16, 128] bf16 swizzled), region Q (q as
// loaded; q and k arrive by cp.async while the gate pass runs) and two [16, 16] staging tiles through
// which every 16 x 16 output tile of qg, kg, w, u leaves (stmatrix in, one 16-byte store per lane out: whole 32-byte
// sectors; stores straight from the fragments wrote half-sectors, and the kernel was bound by L2 traffic).
constexpr int GPAD = D + 8;
constexpr int SPAD = 24;  // bf16 row stride of a staging tile: rows 48 bytes apart, conflict-free stmatrix and reads
constexpr int K1_R_BYTES = BT * GPAD * 4;
constexpr int K1_X_BYTES = BT * D * 2;
constexpr int K1_WARP_BYTES = K1_R_BYTES + 2 * K1_X_BYTES + 2 * BT * SPAD * 2;

// one 16 x 16 bf16 tile in mma accumulator layout (r[e]: rows gi + 8 (e & 1), columns 8 (e >> 1) + gj, + 1) to global
// rows [16, ld] at dst: through a staging tile of this warp (lane l then stores row l % 16, columns 8 (l / 16) + 0..7)
// (rows from nrows on are not stored: token-major outputs end at the sequence's last token)
__device__ __forceinline__ void store_tile(__nv_bfloat16* stage, const uint32_t r[4], __nv_bfloat16* dst, int64_t ld,
                                           int lane, int nrows = BT) {
    stsm_x4(stage + ((lane & 7) + ((lane >> 3) & 1) * 8) * SPAD + (lane >> 4) * 8, r[0], r[1], r[2], r[3]);
    __syncwarp();
    const uint4 x = *reinterpret_cast<const uint4*>(stage + (lane & 15) * SPAD + (lane >> 4) * 8);
    if ((lane & 15) < nrows) *reinterpret_cast<uint4*>(dst + (lane & 15) * ld + (lane >> 4) * 8) = x;
    __syncwarp();
}

// element offset in a [16, 128] bf16 tile whose 16-byte chunks are XOR-swizzled by row (conflict-free ldmatrix)
__device__ __forceinline__ int swz(int r, int c) { return r * D + ((((c >> 3) ^ (r & 7))) << 3) + (c & 7); }

// a thread's fragments of one head's state: s[nt][e] = S^T[v, k], v = v0 (+8 for e >= 2), k = 8 nt + gj (+1 for odd
// e), at `state` of h0 / ht ([K, V], or [V, K] with v_first); h0 null: zeros. The wgmma recurrences use them;
// `kda_state_fwd_kernel` keeps the same loops inline: through these helpers (9c9080a) its register allocation went
// 168 -> 152 and its time at B2 T8192 H32 468 -> 555 us on an H200 (docs/benchmarks/runs/2026-11-28_state64)
__device__ __forceinline__ int64_t state_offset(int v_first, int nt, int e, int64_t v0, int gj) {
    const int64_t v = v0 + (e >> 1) * 8, kcol = nt * 8 + gj + (e & 1);
    return v_first ? v * D + kcol : kcol * D + v;
}

__device__ __forceinline__ void load_state(const float* h0, int v_first, int64_t state, int64_t v0, int gj,
                                           float (&s)[16][4]) {
#pragma unroll
    for (int nt = 0; nt < 16; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = h0 == nullptr ? 0.0f : h0[state + state_offset(v_first, nt, e, v0, gj)];
    }
}

__device__ __forceinline__ void store_state(float* ht, int v_first, int64_t state, int64_t v0, int gj,
                                            const float (&s)[16][4]) {
#pragma unroll
    for (int nt = 0; nt < 16; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) ht[state + state_offset(v_first, nt, e, v0, gj)] = s[nt][e];
    }
}

// helpers of the two intra kernels (16-token `kda_intra_fwd_kernel`, 64-token `kda_intra64_fwd_kernel`); a warp owns
// a block of 16 rows, row r0 of its chunk on, the chunk's first token at t0 and nvalid tokens in it

// 16-byte pieces of the block's rows of x and, with PAIR, y (H heads, head h: [TT, H, D]) to swizzled [.., 128] bf16
// tiles by cp.async; rows past the sequence end zero-filled
template <bool PAIR>
__device__ __forceinline__ void rows_async(__nv_bfloat16* dx, const __nv_bfloat16* x, __nv_bfloat16* dy,
                                           const __nv_bfloat16* y, int64_t t0, int r0, int nvalid, int64_t H,
                                           int64_t h, int lane) {
    for (int i = lane; i < BT * 16; i += 32) {
        const int r = r0 + (i >> 4), p = (i & 15) * 8;
        const bool ok = r < nvalid;
        const int64_t row = ((t0 + (ok ? r : 0)) * H + h) * D + p;
        cp_async16(dx + swz(r, p), x + row, ok);
        if constexpr (PAIR) cp_async16(dy + swz(r, p), y + row, ok);
    }
}

// the block's gate cumsum (log2 units) for the lane's columns c0..c0+3: row t activated (GATE) and summed in row order
// into acc, then handed to row_out(t, acc) (padded rows add no decay); returns the lane's largest |G_t - G_(first row)|
template <int GATE, bool G_F32, class RowOut>
__device__ __forceinline__ float gate_block(const void* g, const float* A_log, const float* dt_bias, float lower_bound,
                                            int64_t t0, int r0, int nvalid, int64_t HV, int64_t hv, int c0,
                                            float (&acc)[4], RowOut&& row_out) {
    float coef = 1.0f, bias[4] = {0.0f, 0.0f, 0.0f, 0.0f}, first[4], range = 0.0f;
    if constexpr (GATE != 0) {
        if (A_log != nullptr) coef = __expf(A_log[hv]);
        if (dt_bias != nullptr) {
#pragma unroll
            for (int e = 0; e < 4; ++e) bias[e] = dt_bias[hv * D + c0 + e];
        }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[e] = 0.0f;
#pragma unroll
    for (int t = 0; t < BT; ++t) {
        const bool ok = r0 + t < nvalid;
        const int64_t off = ((t0 + (ok ? r0 + t : 0)) * HV + hv) * D + c0;
        float raw[4];
        if constexpr (G_F32) {
            const float4 x = *reinterpret_cast<const float4*>(static_cast<const float*>(g) + off);
            raw[0] = x.x; raw[1] = x.y; raw[2] = x.z; raw[3] = x.w;
        } else {
            const uint2 x = *reinterpret_cast<const uint2*>(static_cast<const __nv_bfloat16*>(g) + off);
            const float2 lo = unpack_bf16(x.x), hi = unpack_bf16(x.y);
            raw[0] = lo.x; raw[1] = lo.y; raw[2] = hi.x; raw[3] = hi.y;
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float y = raw[e];
            if constexpr (GATE != 0) y = gate_act<GATE>(y + bias[e], coef, lower_bound);
            acc[e] += ok ? y * LOG2E : 0.0f;
            if (t == 0) first[e] = acc[e];
            range = fmaxf(range, fabsf(acc[e] - first[e]));
        }
        row_out(t, acc);
    }
    return range;
}

// the reciprocal l2 norms of rows gi and gi + 8 from the block's A fragments of q and k (the 4 lanes of a row hold 32
// columns each; 1 without l2norm); q's carries the scale
__device__ __forceinline__ void row_norms(const uint32_t (&qf)[8][4], const uint32_t (&kf)[8][4], bool l2norm,
                                          float scale, float (&rq)[2], float (&rk)[2]) {
    float sq[2] = {0.0f, 0.0f}, sk[2] = {0.0f, 0.0f};
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 x = unpack_bf16(qf[kk][e]), y = unpack_bf16(kf[kk][e]);
            sq[e & 1] += x.x * x.x + x.y * x.y;
            sk[e & 1] += y.x * y.x + y.y * y.y;
        }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
        for (int m = 1; m < 4; m <<= 1) {
            sq[r] += __shfl_xor_sync(0xffffffffu, sq[r], m);
            sk[r] += __shfl_xor_sync(0xffffffffu, sk[r], m);
        }
        rq[r] = (l2norm ? rsqrtf(sq[r] + 1e-6f) : 1.0f) * scale;
        rk[r] = l2norm ? rsqrtf(sk[r] + 1e-6f) : 1.0f;
    }
}

// column c of (I + L)^-1 for a 16 x 16 strictly lower L (fp32, rows 17 apart) by forward substitution in fp32
__device__ __forceinline__ void unit_lower_inverse_column(const float* L, int c, float (&x)[BT]) {
#pragma unroll
    for (int i = 0; i < BT; ++i) {
        float s = i == c ? 1.0f : 0.0f;
#pragma unroll
        for (int j = 0; j < i; ++j) s -= L[i * 17 + j] * x[j];
        x[i] = s;
    }
}

// one 16-column step of w and u: cw += fa fx, cu += fa fv (fx, fv: B fragments of two 8-column tiles each)
__device__ __forceinline__ void wu_mma(float (&cw)[2][4], float (&cu)[2][4], const uint32_t fa[4], const uint32_t fx[4],
                                       const uint32_t fv[4]) {
    mma(cw[0], fa, fx[0], fx[1]);
    mma(cw[1], fa, fx[2], fx[3]);
    mma(cu[0], fa, fv[0], fv[1]);
    mma(cu[1], fa, fv[2], fv[3]);
}

// two 16 x 8 accumulator tiles as the bf16 registers `store_tile` takes
__device__ __forceinline__ void pack_tile(const float (&c)[2][4], uint32_t (&o)[4]) {
    o[0] = pack_bf16(c[0][0], c[0][1]);
    o[1] = pack_bf16(c[0][2], c[0][3]);
    o[2] = pack_bf16(c[1][0], c[1][1]);
    o[3] = pack_bf16(c[1][2], c[1][3]);
}

#ifndef KDA_K1_MIN_BLOCKS
#define KDA_K1_MIN_BLOCKS 3  // CTAs per SM the register allocation targets: 3 (168 registers, under 100 bytes of
                             // spills) beat 2 by 4-5% on an H100 (2026-11-27); the 128-register cap of 4 spilled
                             // to L2 (1.18 vs 0.67 ms at B2 T8192 H32)
#endif

template <int GATE, bool G_F32>
__global__ void __launch_bounds__(K1_WARPS * 32, KDA_K1_MIN_BLOCKS) kda_intra_fwd_kernel(const FwdArgs a) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t ci = static_cast<int64_t>(blockIdx.x) * K1_WARPS + warp;
    if (a.pieces > 1) {  // equal-length sequences: the cnt chunks [chunk_lo, chunk_hi) of each, sequence-major
        const int64_t cnt = a.chunk_hi - a.chunk_lo;
        if (ci >= a.N * cnt) return;
        ci = (ci / cnt) * (a.NT / a.N) + a.chunk_lo + ci % cnt;
    } else if (ci >= a.NT) {
        return;  // warp-uniform; kernel 1 synchronises warps only
    }
    const int64_t hv = blockIdx.y;
    const int64_t h = hv / (a.HV / a.H);
    const int64_t seq = a.chunk_indices[2 * ci], local = a.chunk_indices[2 * ci + 1];
    const int64_t t0 = a.cu_seqlens[seq] + BT * local;
    const int nvalid = static_cast<int>(min(static_cast<int64_t>(BT), a.cu_seqlens[seq + 1] - t0));
    const int gi = lane >> 2, gj = (lane & 3) * 2;

    unsigned char* region = smem + warp * K1_WARP_BYTES;
    float* sG = reinterpret_cast<float*>(region);
    __nv_bfloat16* sv = reinterpret_cast<__nv_bfloat16*>(region);
    float* sL = reinterpret_cast<float*>(region + BT * D * 2);
    __nv_bfloat16* sA = reinterpret_cast<__nv_bfloat16*>(region + BT * D * 2 + BT * 17 * 4);
    __nv_bfloat16* sx = reinterpret_cast<__nv_bfloat16*>(region + K1_R_BYTES);
    __nv_bfloat16* sq = reinterpret_cast<__nv_bfloat16*>(region + K1_R_BYTES + K1_X_BYTES);
    __nv_bfloat16* st0 = reinterpret_cast<__nv_bfloat16*>(region + K1_R_BYTES + 2 * K1_X_BYTES);
    __nv_bfloat16* st1 = st0 + BT * SPAD;

    // 0. q and k rows to Q and X (rows past the sequence end zero-filled), landing while the gate pass runs
    rows_async<true>(sq, a.q, sx, a.k, t0, 0, nvalid, a.H, h, lane);
    cp_async_commit();

    // 1. gate and in-chunk cumsum (log2 units), lane owning columns c0..c0+3, rows written to G as they complete
    const int c0 = lane * 4;
    float acc[4];
    float range = gate_block<GATE, G_F32>(a.g, a.A_log, a.dt_bias, a.lower_bound, t0, 0, nvalid, a.HV, hv, c0, acc,
                                          [&](int t, const float (&x)[4]) {
        *reinterpret_cast<float4*>(sG + t * GPAD + c0) = make_float4(x[0], x[1], x[2], x[3]);
    });
    *reinterpret_cast<float4*>(a.decay + (hv * a.NT + ci) * D + c0) =
        make_float4(fast_exp2(acc[0]), fast_exp2(acc[1]), fast_exp2(acc[2]), fast_exp2(acc[3]));
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) range = fmaxf(range, __shfl_xor_sync(0xffffffffu, range, m));
    const bool exact = !(range <= RANGE_MAX);  // NaN-safe: a NaN range takes the exact path

    // 2. q and k fragments (ldmatrix: A-operand layout, k-step kk in qf[kk], kf[kk])
    uint32_t qf[8][4], kf[8][4];
    cp_async_wait<0>();
    __syncwarp();
    {
        const int r = (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
            ldsm_x4(qf[kk], sq + swz(r, kk * 16 + (lane >> 4) * 8));
            ldsm_x4(kf[kk], sx + swz(r, kk * 16 + (lane >> 4) * 8));
        }
    }
    __syncwarp();  // X is written (k e^{G}) below

    // beta (activated; zero on padded rows), kept by lanes 0..15
    float beta = 0.0f;
    if (lane < BT && lane < nvalid) {
        beta = load_scalar(a.beta, (t0 + lane) * a.HV + hv, a.beta_fp32);
        if (a.beta_sigmoid) beta = a.beta_scale / (1.0f + __expf(-beta));
    }

    // 3. row norms of rows gi and gi + 8; q's factor carries the scale
    float rq[2], rk[2];
    row_norms(qf, kf, a.l2norm, a.scale, rq, rk);
    __syncwarp();

    // 4. element-wise factors per k-step: qg, kg to the workspace, k e^{G} to X, and (fast path) the Aqk and L
    //    products straight from registers; the exact path parks q, k in this chunk's w/u workspace rows instead
    const int64_t tile = (hv * a.NT + ci) * BT;  // first row of this chunk in the [HV, NT, 16, ...] workspaces
    __nv_bfloat16* const w_rows[2] = {a.w + (tile + gi) * D, a.w + (tile + gi + 8) * D};
    __nv_bfloat16* const u_rows[2] = {a.u + (tile + gi) * D, a.u + (tile + gi + 8) * D};
    float aqk[2][4] = {}, lkk[2][4] = {};
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        uint32_t fq[4], fk[4], fi[4], oq[4], ok[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int row = gi + (e & 1) * 8, col = kk * 16 + (e >> 1) * 8 + gj;
            const float2 G = *reinterpret_cast<const float2*>(sG + row * GPAD + col);
            const float2 G0 = *reinterpret_cast<const float2*>(sG + col);
            const float2 GL = *reinterpret_cast<const float2*>(sG + (BT - 1) * GPAD + col);
            const float2 x = unpack_bf16(qf[kk][e]), y = unpack_bf16(kf[kk][e]);
            const float qs0 = x.x * rq[e & 1], qs1 = x.y * rq[e & 1];
            const float ks0 = y.x * rk[e & 1], ks1 = y.y * rk[e & 1];
            const float e0 = fast_exp2(G.x), e1 = fast_exp2(G.y);
            oq[e] = pack_bf16(qs0 * e0, qs1 * e1);
            ok[e] = pack_bf16(ks0 * fast_exp2(GL.x - G.x), ks1 * fast_exp2(GL.y - G.y));
            *reinterpret_cast<uint32_t*>(sx + swz(row, col)) = pack_bf16(ks0 * e0, ks1 * e1);
            if (!exact) {
                const float a0 = fast_exp2(G.x - G0.x), a1 = fast_exp2(G.y - G0.y);
                fq[e] = pack_bf16(qs0 * a0, qs1 * a1);
                fk[e] = pack_bf16(ks0 * a0, ks1 * a1);
                fi[e] = pack_bf16(ks0 * fast_exp2(G0.x - G.x), ks1 * fast_exp2(G0.y - G.y));
            } else {
                *reinterpret_cast<uint32_t*>(w_rows[e & 1] + col) = pack_bf16(qs0, qs1);
                *reinterpret_cast<uint32_t*>(u_rows[e & 1] + col) = pack_bf16(ks0, ks1);
            }
        }
        store_tile(st0, oq, a.qg + tile * D + kk * 16, D, lane);
        store_tile(st1, ok, a.kg + tile * D + kk * 16, D, lane);
        if (!exact) {
            // B fragments of k e^{G_0 - G}: n-tile 0 is rows 0-7 (registers e = 0, 2), n-tile 1 rows 8-15 (e = 1, 3)
            mma(aqk[0], fq, fi[0], fi[2]);
            mma(aqk[1], fq, fi[1], fi[3]);
            mma(lkk[0], fk, fi[0], fi[2]);
            mma(lkk[1], fk, fi[1], fi[3]);
        }
    }
    __syncwarp();
    if (exact) {
        // sum_d q_i k_j e^{G_i - G_j} with the exponent <= 0 (j <= i), one exp2 per term
#pragma unroll
        for (int n = 0; n < 2; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = gi + (e >> 1) * 8, j = n * 8 + gj + (e & 1);
                if (j > i) continue;
                float s1 = 0.0f, s2 = 0.0f;
                for (int d = 0; d < D; ++d) {
                    const float kd = __bfloat162float(__ldcg(a.u + (tile + j) * D + d)) *
                                     exp2f(sG[i * GPAD + d] - sG[j * GPAD + d]);
                    s1 += __bfloat162float(__ldcg(a.w + (tile + i) * D + d)) * kd;
                    s2 += __bfloat162float(__ldcg(a.u + (tile + i) * D + d)) * kd;
                }
                aqk[n][e] = s1;
                lkk[n][e] = s2;
            }
        }
        __syncwarp();
    }

    // 5. v into region R (G is dead), while the masks and the inverse run
    rows_async<false>(sv, a.v, nullptr, nullptr, t0, 0, nvalid, a.HV, hv, lane);
    cp_async_commit();

    // 6. masks; Aqk to the workspace, beta_i L[i, j] (j < i) to shared memory
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int hrow = 0; hrow < 2; ++hrow) {
            const int i = gi + hrow * 8, j = n * 8 + gj;
            const bool vi = i < nvalid;
            const float bi = __shfl_sync(0xffffffffu, beta, i);
            const float x0 = vi && j <= i ? aqk[n][2 * hrow] : 0.0f;
            const float x1 = vi && j + 1 <= i ? aqk[n][2 * hrow + 1] : 0.0f;
            *reinterpret_cast<uint32_t*>(a.aqk + (tile + i) * BT + j) = pack_bf16(x0, x1);
            sL[i * 17 + j] = j < i ? bi * lkk[n][2 * hrow] : 0.0f;
            sL[i * 17 + j + 1] = j + 1 < i ? bi * lkk[n][2 * hrow + 1] : 0.0f;
        }
    }
    __syncwarp();

    // 7. (I + L)^-1 by forward substitution in fp32: lane c (< 16) builds column c; then Akk diag(beta) as bf16
    {
        const int c = lane & 15;
        float x[BT];
        unit_lower_inverse_column(sL, c, x);
        const float bc = __shfl_sync(0xffffffffu, beta, c);
        if (lane < BT) {
#pragma unroll
            for (int i = 0; i < BT; ++i) sA[i * APAD + c] = __float2bfloat16_rn(x[i] * bc);
        }
    }
    cp_async_wait<0>();
    __syncwarp();

    // 8. w = Akk diag(beta) k e^{G}, u = Akk diag(beta) v, stored from the accumulators
    {
        uint32_t fa[4];
        ldsm_x4(fa, tile_a(sA, APAD, 0, lane));
        const int r = (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int np = 0; np < D / 16; ++np) {
            uint32_t fx[4], fv[4];
            const int c = np * 16 + (lane >> 4) * 8;
            ldsm_x4_t(fx, sx + swz(r, c));
            ldsm_x4_t(fv, sv + swz(r, c));
            float cw[2][4] = {}, cu[2][4] = {};
            wu_mma(cw, cu, fa, fx, fv);
            uint32_t ow[4], ou[4];
            pack_tile(cw, ow);
            pack_tile(cu, ou);
            store_tile(st0, ow, a.w + tile * D + np * 16, D, lane);
            store_tile(st1, ou, a.u + tile * D + np * 16, D, lane);
        }
    }
}

// The (sequence, v-head, block of BV state columns) of this recurrence CTA. Without a.seq_order: grid (N D / BV, HV),
// n = x / (D / BV); with it: a 1-D grid, rank-major (every head of the rank-0 sequence is dispatched first), n =
// seq_order[rank] (`launch_state`).
__device__ __forceinline__ void state_cta(const FwdArgs& a, int64_t vblocks, int64_t& n, int64_t& hv, int64_t& vb) {
    if (a.seq_order == nullptr) {
        n = blockIdx.x / vblocks, vb = blockIdx.x % vblocks, hv = blockIdx.y;
        return;
    }
    const int64_t b = blockIdx.x, per = a.HV * vblocks;
    n = a.seq_order[b / per], hv = (b % per) / vblocks, vb = b % vblocks;
}

// ---------------------------------------------------------------------------------------------------------------
// Kernel 2: head-parallel recurrence and output. Warp `wv` owns rows [16 wv, 16 wv + 16) of the CTA's BV columns
// of the state, transposed: S^T[v, k] in mma accumulator layout, 16 n-tiles of 8 k-columns.
constexpr int K2_TILE = BT * PAD;
constexpr int K2_STAGE_BYTES = 3 * K2_TILE * 2 + BT * (64 + 8) * 2 + BT * APAD * 2 + D * 4;

template <int BV>
__global__ void __launch_bounds__(BV * 2) kda_state_fwd_kernel(const FwdArgs a) {
    constexpr int THREADS = BV * 2, UPAD = BV + 8;
    extern __shared__ __align__(16) unsigned char smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tid = threadIdx.x;
    int64_t n, hv, vb;
    state_cta(a, D / BV, n, hv, vb);
    const int64_t bos = a.cu_seqlens[n], len = a.cu_seqlens[n + 1] - bos;
    const int64_t nch = (len + BT - 1) / BT, c_first = a.chunk_offsets[n];

    auto stage_ptr = [&](int s) { return smem + s * K2_STAGE_BYTES; };
    auto load_stage = [&](int64_t c, int s) {
        __nv_bfloat16* sw = reinterpret_cast<__nv_bfloat16*>(stage_ptr(s));
        __nv_bfloat16* sqg = sw + K2_TILE;
        __nv_bfloat16* skg = sqg + K2_TILE;
        __nv_bfloat16* su = skg + K2_TILE;
        __nv_bfloat16* sa = su + BT * 72;
        float* sdec = reinterpret_cast<float*>(sa + BT * APAD);
        const int64_t tile = (hv * a.NT + c_first + c) * BT;
        for (int i = tid; i < BT * 16; i += THREADS) {
            const int r = i >> 4, p = (i & 15) * 8;
            cp_async16(sw + r * PAD + p, a.w + (tile + r) * D + p, true);
            cp_async16(sqg + r * PAD + p, a.qg + (tile + r) * D + p, true);
            cp_async16(skg + r * PAD + p, a.kg + (tile + r) * D + p, true);
        }
        for (int i = tid; i < BT * (BV / 8); i += THREADS) {
            const int r = i / (BV / 8), p = (i % (BV / 8)) * 8;
            cp_async16(su + r * 72 + p, a.u + (tile + r) * D + vb * BV + p, true);
        }
        for (int i = tid; i < BT * 2 + D / 4; i += THREADS) {
            if (i < BT * 2) {
                cp_async16(sa + (i >> 1) * APAD + (i & 1) * 8, a.aqk + (tile + (i >> 1)) * BT + (i & 1) * 8, true);
            } else {
                const int p = (i - BT * 2) * 4;
                cp_async16(sdec + p, a.decay + (hv * a.NT + c_first + c) * D + p, true);
            }
        }
    };

    // state: s[n][e] = S^T[v, k], v = 16 warp + gi (+8 for e >= 2), k = 8 n + gj (+1 for odd e)
    const int gi = lane >> 2, gj = (lane & 3) * 2;
    const int64_t v0 = vb * BV + warp * 16 + gi;
    const int64_t state = (n * a.HV + hv) * D * D;
    float s[16][4];
#pragma unroll
    for (int nt = 0; nt < 16; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int64_t v = v0 + (e >> 1) * 8, kcol = nt * 8 + gj + (e & 1);
            s[nt][e] = a.h0 == nullptr ? 0.0f : a.h0[state + (a.v_first ? v * D + kcol : kcol * D + v)];
        }
    }

#pragma unroll
    for (int st = 0; st < K2_STAGES - 1; ++st) {
        if (st < nch) load_stage(st, st);
        cp_async_commit();
    }
    __nv_bfloat16* so = reinterpret_cast<__nv_bfloat16*>(stage_ptr(K2_STAGES));  // [16, UPAD] output tile

    for (int64_t c = 0; c < nch; ++c) {
        cp_async_wait<K2_STAGES - 2>();
        __syncthreads();
        if (c + K2_STAGES - 1 < nch) load_stage(c + K2_STAGES - 1, static_cast<int>((c + K2_STAGES - 1) % K2_STAGES));
        cp_async_commit();
        const unsigned char* base = stage_ptr(static_cast<int>(c % K2_STAGES));
        const __nv_bfloat16* sw = reinterpret_cast<const __nv_bfloat16*>(base);
        const __nv_bfloat16* sqg = sw + K2_TILE;
        const __nv_bfloat16* skg = sqg + K2_TILE;
        const __nv_bfloat16* su = skg + K2_TILE;
        const __nv_bfloat16* sa = su + BT * 72;
        const float* sdec = reinterpret_cast<const float*>(sa + BT * APAD);

        // operands first (their shared-memory latencies overlap): w, qg, Aqk fragments, u, decay
        uint32_t fw[8][4], fq[8][4], fa[4];
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            ldsm_x4(fw[kk], tile_bn(sw, PAD, kk * 16, lane));
            ldsm_x4(fq[kk], tile_bn(sqg, PAD, kk * 16, lane));
        }
        ldsm_x4(fa, tile_bn(sa, APAD, 0, lane));
        float uu[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                uu[nt][e] = __bfloat162float(su[(nt * 8 + gj + (e & 1)) * 72 + warp * 16 + gi + (e >> 1) * 8]);
            }
        }
        float2 dec[16];
#pragma unroll
        for (int nt = 0; nt < 16; ++nt) dec[nt] = *reinterpret_cast<const float2*>(sdec + nt * 8 + gj);

        // w S and qg S (transposed: S^T w^T, S^T qg^T); two accumulator chains for w S to shorten the dependency
        float vw[2][2][4] = {}, oo[2][4] = {};
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const uint32_t fs[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                                    pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                    pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            mma(vw[kk & 1][0], fs, fw[kk][0], fw[kk][1]);
            mma(vw[kk & 1][1], fs, fw[kk][2], fw[kk][3]);
            mma(oo[0], fs, fq[kk][0], fq[kk][1]);
            mma(oo[1], fs, fq[kk][2], fq[kk][3]);
        }
        uint32_t fk[8][4];
#pragma unroll
        for (int np = 0; np < D / 16; ++np) ldsm_x4_t(fk[np], tile_a(skg, PAD, np * 16, lane));
#pragma unroll
        for (int nt = 0; nt < 16; ++nt) {
            s[nt][0] *= dec[nt].x; s[nt][1] *= dec[nt].y; s[nt][2] *= dec[nt].x; s[nt][3] *= dec[nt].y;
        }
        // v_new^T = u^T - S^T w^T, as the bf16 A operand (16 v-rows x 16 tokens)
        float vn[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) vn[nt][e] = uu[nt][e] - (vw[0][nt][e] + vw[1][nt][e]);
        }
        const uint32_t fv[4] = {pack_bf16(vn[0][0], vn[0][1]), pack_bf16(vn[0][2], vn[0][3]),
                                pack_bf16(vn[1][0], vn[1][1]), pack_bf16(vn[1][2], vn[1][3])};
        // S^T <- S^T diag(decay) + v_new^T kg;  o^T += v_new^T Aqk^T
#pragma unroll
        for (int np = 0; np < D / 16; ++np) {
            mma(s[2 * np], fv, fk[np][0], fk[np][1]);
            mma(s[2 * np + 1], fv, fk[np][2], fk[np][3]);
        }
        mma(oo[0], fv, fa[0], fa[1]);
        mma(oo[1], fv, fa[2], fa[3]);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int vl = warp * 16 + gi + (e >> 1) * 8, j = nt * 8 + gj + (e & 1);
                so[j * UPAD + vl] = __float2bfloat16_rn(oo[nt][e]);
            }
        }
        __syncthreads();
        for (int i = tid; i < BT * (BV / 8); i += THREADS) {
            const int r = i / (BV / 8), p = (i % (BV / 8)) * 8;
            if (c * BT + r < len) {
                *reinterpret_cast<uint4*>(a.o + ((bos + c * BT + r) * a.HV + hv) * D + vb * BV + p) =
                    *reinterpret_cast<const uint4*>(so + r * UPAD + p);
            }
        }
    }
    cp_async_wait<0>();
    if (a.ht != nullptr) {
#pragma unroll
        for (int nt = 0; nt < 16; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int64_t v = v0 + (e >> 1) * 8, kcol = nt * 8 + gj + (e & 1);
                a.ht[state + (a.v_first ? v * D + kcol : kcol * D + v)] = s[nt][e];
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Kernel 2 on wgmma (sm_90a): one warpgroup per (sequence, v-head, 64 state columns), the state transposed in fp32
// wgmma accumulators (S^T[v, k]: the m64n128 accumulator layout, which is the mma.sync layout of
// `kda_state_fwd_kernel` for 16 v-rows per warp), its bf16 copy the register A operand. Per 16-token chunk:
//   [P | O1] = S^T [w ; qg]^T        8 x m64n32k16, B K-major from shared memory
//   v_new^T  = u^T - P
//   S^T      = S^T diag(decay) + v_new^T kg      m64n128k16, B N-major (kg rows as stored)
//   o^T      = O1 + v_new^T Aqk^T                m64n16k16 (its own accumulators), B K-major
// [w ; qg] and kg in 128-byte swizzled layouts (as `kda_state64_fwd_kernel`'s, below: rows of 64 bf16, the 16-byte
// piece p of row r at p ^ (r % 8), 1024-byte aligned 8-row atoms, two channel halves), Aqk in the canonical
// no-swizzle core-matrix layout (8 rows x 16 bytes, rows 16 bytes apart).
constexpr int W_WQ = 32 * D * 2;          // [w ; qg]: channel half h, row n (w 0-15, qg 16-31) at h 4096 + n 128
constexpr int W_KG = BT * D * 2;          // kg: channel half h, token t at h 2048 + t 128 (N-major: LBO 2048)
constexpr int W_AQK = BT * BT * 2;        // Aqk: 16 x 16, K-major: core (i, j) at (i/8) 256 + (j/8) 128
constexpr int W_U = BT * 72 * 2;          // u: 16 tokens x 64 (+8 pad), row-major
constexpr int W_STAGE = 16384;            // a stage: the tiles above and the decay (D fp32), 1024-byte aligned
static_assert(W_WQ + W_KG + W_AQK + W_U + D * 4 <= W_STAGE, "stage size");

__device__ __forceinline__ uint64_t smem_desc(const void* p, uint32_t lbo, uint32_t sbo) {
    // start address, leading / stride byte offsets (16-byte units), no swizzle
    return static_cast<uint64_t>((smem_addr(p) & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
           (static_cast<uint64_t>(sbo >> 4) << 32);
}
// the same for a tile in the 128-byte swizzled layout (its 8-row atoms 1024-byte aligned)
__device__ __forceinline__ uint64_t smem_desc_sw128(const void* p, uint32_t lbo, uint32_t sbo) {
    return smem_desc(p, lbo, sbo) | (1ull << 62);
}
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
#define KDA_WGMMA 1  // sm_90a device code (wgmma exists there only); other targets compile an empty kernel
#endif
#if defined(KDA_WGMMA)
template <int N>
__device__ __forceinline__ void fence_operands(float* r) {  // keeps accumulators in place across a wgmma group
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_operands(uint32_t* r) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// d[16] (+)= A (4 bf16x2 registers) x B (desc, K-major), m64n32k16
__device__ __forceinline__ void wgmma_n32(float d[16], const uint32_t a[4], uint64_t desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate));
}

// d[8] = A x B (K-major), m64n16k16
__device__ __forceinline__ void wgmma_n16(float d[8], const uint32_t a[4], uint64_t desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}

// s[16][4] (+)= A x B, m64n128k16, B N-major (TRANS_B 1: imm-trans-b) or K-major (0); s[nt][e] is accumulator 4 nt + e
template <int TRANS_B>
__device__ __forceinline__ void wgmma_n128(float (&s)[16][4], const uint32_t a[4], uint64_t desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : "+f"(s[0][0]), "+f"(s[0][1]), "+f"(s[0][2]), "+f"(s[0][3]), "+f"(s[1][0]), "+f"(s[1][1]), "+f"(s[1][2]),
          "+f"(s[1][3]), "+f"(s[2][0]), "+f"(s[2][1]), "+f"(s[2][2]), "+f"(s[2][3]), "+f"(s[3][0]), "+f"(s[3][1]),
          "+f"(s[3][2]), "+f"(s[3][3]), "+f"(s[4][0]), "+f"(s[4][1]), "+f"(s[4][2]), "+f"(s[4][3]), "+f"(s[5][0]),
          "+f"(s[5][1]), "+f"(s[5][2]), "+f"(s[5][3]), "+f"(s[6][0]), "+f"(s[6][1]), "+f"(s[6][2]), "+f"(s[6][3]),
          "+f"(s[7][0]), "+f"(s[7][1]), "+f"(s[7][2]), "+f"(s[7][3]), "+f"(s[8][0]), "+f"(s[8][1]), "+f"(s[8][2]),
          "+f"(s[8][3]), "+f"(s[9][0]), "+f"(s[9][1]), "+f"(s[9][2]), "+f"(s[9][3]), "+f"(s[10][0]), "+f"(s[10][1]),
          "+f"(s[10][2]), "+f"(s[10][3]), "+f"(s[11][0]), "+f"(s[11][1]), "+f"(s[11][2]), "+f"(s[11][3]),
          "+f"(s[12][0]), "+f"(s[12][1]), "+f"(s[12][2]), "+f"(s[12][3]), "+f"(s[13][0]), "+f"(s[13][1]),
          "+f"(s[13][2]), "+f"(s[13][3]), "+f"(s[14][0]), "+f"(s[14][1]), "+f"(s[14][2]), "+f"(s[14][3]),
          "+f"(s[15][0]), "+f"(s[15][1]), "+f"(s[15][2]), "+f"(s[15][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate), "n"(TRANS_B));
}

// d[8][4] += A x B (K-major), m64n64k16
__device__ __forceinline__ void wgmma_n64_acc(float (&d)[8][4], const uint32_t a[4], uint64_t desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),
          "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]),
          "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]),
          "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
          "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}

#endif

#ifndef KDA_K2W_MIN_BLOCKS
#define KDA_K2W_MIN_BLOCKS 1  // CTAs per SM the register allocation targets: 1 (254 registers), or 3 (168, 56 bytes of
                              // spills: one recurrence and two intra CTAs could share an SM, design.md milestone 5)
#endif
__global__ void __launch_bounds__(128, KDA_K2W_MIN_BLOCKS) kda_state_fwd_wgmma_kernel(const FwdArgs a) {
#if defined(KDA_WGMMA)
    constexpr int BV = 64, THREADS = 128, UPAD = BV + 8;
    extern __shared__ __align__(1024) unsigned char smem_sw[];  // the swizzled tiles need 1024-byte alignment
    unsigned char* smem = smem_sw;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tid = threadIdx.x;
    int64_t n, hv, vb;
    state_cta(a, D / BV, n, hv, vb);
    const int64_t bos = a.cu_seqlens[n], len = a.cu_seqlens[n + 1] - bos;
    const int64_t c_first = a.chunk_offsets[n];
    const int64_t lo = a.pieces > 1 ? a.chunk_lo : 0, hi = a.pieces > 1 ? a.chunk_hi : (len + BT - 1) / BT;

    auto stage_ptr = [&](int st) { return smem + st * W_STAGE; };
    // Each thread's 16-byte pieces of a stage sit at the same offsets in every chunk (only the tile's base moves):
    // their shared-memory and global offsets are computed once. [w ; qg] and kg: BT * 16 pieces each, 2 a thread
    // (row r, channels 8 p8 .. 8 p8 + 7); u: one a thread; Aqk (2 a row) and the decay (4 floats a piece): threads
    // 0 .. BT * 2 + D / 4 - 1.
    constexpr int P_TILE = BT * 16 / THREADS;
    static_assert(BT * 16 % THREADS == 0 && BT * (BV / 8) == THREADS && BT * 2 + D / 4 <= THREADS, "piece split");
    uint32_t o_w[P_TILE], o_q[P_TILE], o_k[P_TILE];
    int g_row[P_TILE];
#pragma unroll
    for (int j = 0; j < P_TILE; ++j) {
        const int i = tid + j * THREADS, r = i >> 4, p8 = i & 15;
        g_row[j] = r * D + p8 * 8;
        const int sp = ((p8 % 8) ^ (r % 8)) * 16;  // the swizzled piece ((r + BT) % 8 = r % 8)
        o_w[j] = (p8 / 8) * 4096 + r * 128 + sp;
        o_q[j] = (p8 / 8) * 4096 + (r + BT) * 128 + sp;
        o_k[j] = W_WQ + (p8 / 8) * 2048 + r * 128 + sp;
    }
    const int g_u = (tid / (BV / 8)) * D + static_cast<int>(vb) * BV + (tid % (BV / 8)) * 8;
    const uint32_t o_u = W_WQ + W_KG + W_AQK + ((tid / (BV / 8)) * UPAD + (tid % (BV / 8)) * 8) * 2;
    const bool is_aqk = tid < BT * 2, is_dec = !is_aqk && tid < BT * 2 + D / 4;
    const int g_ad = is_aqk ? (tid >> 1) * BT + (tid & 1) * 8 : (tid - BT * 2) * 4;
    const uint32_t o_ad = is_aqk ? W_WQ + W_KG + ((tid >> 1) >> 3) * 256 + (tid & 1) * 128 + ((tid >> 1) & 7) * 16
                                 : W_WQ + W_KG + W_AQK + W_U + (tid - BT * 2) * 16;
    const int r_o = tid / (BV / 8), p_o = (tid % (BV / 8)) * 8;
    const int64_t g_o = static_cast<int64_t>(r_o) * a.HV * D + vb * BV + p_o;
    const uint32_t smem0 = smem_addr(smem);
    if ((smem0 & 1023) != 0) __trap();  // the dynamic shared memory starts aligned (no static shared memory here)
    auto load_stage = [&](int64_t c, int st) {
        const uint32_t base = smem0 + st * W_STAGE;
        const int64_t chunk = hv * a.NT + c_first + c, tile = chunk * BT;
        const __nv_bfloat16 *gw = a.w + tile * D, *gq = a.qg + tile * D, *gk = a.kg + tile * D;
#pragma unroll
        for (int j = 0; j < P_TILE; ++j) {
            cp_async16_to(base + o_w[j], gw + g_row[j]);
            cp_async16_to(base + o_q[j], gq + g_row[j]);
            cp_async16_to(base + o_k[j], gk + g_row[j]);
        }
        cp_async16_to(base + o_u, a.u + tile * D + g_u);
        if (is_aqk) cp_async16_to(base + o_ad, a.aqk + tile * BT + g_ad);
        if (is_dec) cp_async16_to(base + o_ad, a.decay + chunk * D + g_ad);
    };

    // s[nt][e] = S^T[v, k], v = 16 warp + gi (+8 for e >= 2), k = 8 nt + gj (+1 for odd e)
    const int gi = lane >> 2, gj = (lane & 3) * 2;
    const int64_t v0 = vb * BV + warp * 16 + gi;
    const int64_t state = (n * a.HV + hv) * D * D;
    float s[16][4];
    load_state(a.h0, a.v_first, state, v0, gj, s);

#pragma unroll
    for (int st = 0; st < K2_STAGES - 1; ++st) {
        if (lo + st < hi) load_stage(lo + st, st);
        cp_async_commit();
    }
    __nv_bfloat16* so = reinterpret_cast<__nv_bfloat16*>(stage_ptr(K2_STAGES));  // [16, UPAD] output tile
    // the stage-0 descriptors; a stage's are these plus its offset (addresses in 16-byte units, below 2^14: no carry)
    const uint64_t d_wq0 = smem_desc_sw128(smem, 16, 1024), d_kg0 = smem_desc_sw128(smem + W_WQ, 2048, 1024),
                   d_aq0 = smem_desc(smem + W_WQ + W_KG, 128, 256);

    for (int64_t c = lo; c < hi; ++c) {
        cp_async_wait<K2_STAGES - 2>();
        fence_async_smem();  // the cp.async writes (generic proxy) before wgmma reads them (async proxy)
        __syncthreads();
        if (c + K2_STAGES - 1 < hi) {
            load_stage(c + K2_STAGES - 1, static_cast<int>((c - lo + K2_STAGES - 1) % K2_STAGES));
        }
        cp_async_commit();
        const int st = static_cast<int>((c - lo) % K2_STAGES);
        const unsigned char* base = stage_ptr(st);
        const __nv_bfloat16* su = reinterpret_cast<const __nv_bfloat16*>(base + W_WQ + W_KG + W_AQK);
        const float* sdec = reinterpret_cast<const float*>(base + W_WQ + W_KG + W_AQK + W_U);
        const uint64_t d_st = static_cast<uint64_t>(st * W_STAGE) >> 4;

        // [P | O1] = S^T [w ; qg]^T: accumulator j-blocks 0-1 are P (tokens 0-15), 2-3 are O1
        float pq[16];
        uint32_t fs[8][4];
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            fs[kk][0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
            fs[kk][1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
            fs[kk][2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            fs[kk][3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        }
        fence_operands<32>(&fs[0][0]);
        wg_fence();
        fence_operands<16>(pq);
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {  // 16 channels: 32 bytes into a row of channel half kk / 4
            wgmma_n32(pq, fs[kk], d_wq0 + d_st + ((kk / 4) * 4096 + (kk % 4) * 32) / 16, kk > 0);
        }
        wg_commit();
        // operands of the element-wise part while the products run: u^T, the decay
        // u^T [v, token] in the accumulator layout: the u tile [token, v] read transposed, one ldmatrix
        uint32_t fu[4];
        ldsm_x4_t(fu, su + (((lane >> 4) << 3) + (lane & 7)) * UPAD + warp * 16 + ((lane >> 3) & 1) * 8);
        float uu[2][4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {  // fu[q]: v-rows (q & 1) 8 + gi, tokens (q >> 1) 8 + gj, + 1
            const float2 x = unpack_bf16(fu[q]);
            uu[q >> 1][(q & 1) * 2] = x.x;
            uu[q >> 1][(q & 1) * 2 + 1] = x.y;
        }
        float2 dec[16];
#pragma unroll
        for (int nt = 0; nt < 16; ++nt) dec[nt] = *reinterpret_cast<const float2*>(sdec + nt * 8 + gj);
        wg_wait0();
        fence_operands<16>(pq);
        fence_operands<32>(&fs[0][0]);

        // v_new^T = u^T - P, as the bf16 A operand (64 v-rows x 16 tokens); S^T <- S^T diag(decay)
        float vn[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) vn[nt][e] = uu[nt][e] - pq[nt * 4 + e];
        }
        const uint32_t fv[4] = {pack_bf16(vn[0][0], vn[0][1]), pack_bf16(vn[0][2], vn[0][3]),
                                pack_bf16(vn[1][0], vn[1][1]), pack_bf16(vn[1][2], vn[1][3])};
#pragma unroll
        for (int nt = 0; nt < 16; ++nt) {
            s[nt][0] *= dec[nt].x; s[nt][1] *= dec[nt].y; s[nt][2] *= dec[nt].x; s[nt][3] *= dec[nt].y;
        }
        // S^T += v_new^T kg;  o^T = O1 + v_new^T Aqk^T
        float o2[8];
        wg_fence();
        fence_operands<64>(&s[0][0]);
        fence_operands<8>(o2);
        wgmma_n128<1>(s, fv, d_kg0 + d_st, 1);
        wgmma_n16(o2, fv, d_aq0 + d_st);
        wg_commit();
        wg_wait0();
        fence_operands<64>(&s[0][0]);
        fence_operands<8>(o2);
        // o^T [v, token] out transposed into the [token, v] tile: matrix q = v-rows (q & 1) 8, tokens (q >> 1) 8
        float ov[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) ov[i] = pq[8 + i] + o2[i];
        stsm_x4_t(so + (((lane >> 4) << 3) + (lane & 7)) * UPAD + warp * 16 + ((lane >> 3) & 1) * 8,
                  pack_bf16(ov[0], ov[1]), pack_bf16(ov[2], ov[3]), pack_bf16(ov[4], ov[5]), pack_bf16(ov[6], ov[7]));
        __syncthreads();
        if (c * BT + r_o < len) {  // one 16-byte piece of o a thread: row r_o, columns p_o .. p_o + 7
            *reinterpret_cast<uint4*>(a.o + ((bos + c * BT) * a.HV + hv) * D + g_o) =
                *reinterpret_cast<const uint4*>(so + r_o * UPAD + p_o);
        }
    }
    cp_async_wait<0>();
    if (a.ht != nullptr) store_state(a.ht, a.v_first, state, v0, gj, s);
#endif
}

// ---------------------------------------------------------------------------------------------------------------
// The recurrence over 64-token chunks on wgmma (sm_90a), on the intra stage's token-major outputs (`State64Args`):
// a consumer warpgroup per (sequence, v-head, 64 state columns), S^T[v, k] in fp32 m64n128 accumulators as in
// `kda_state_fwd_wgmma_kernel`, a quarter of its steps; a CTA holds one (a CTA per 64 columns) or both of a head's
// (one CTA per head, its tiles loaded once: where one-warpgroup CTAs would outnumber the SMs). Per 64-token chunk:
//   [P | O1] = S^T [w ; qg]^T          8 x m64n128k16, B K-major (w tokens are columns 0-63, qg tokens 64-127)
//   v_new^T  = u^T - P                  (non-finite values zeroed, as Triton's state pass does)
//   S^T      = S^T diag(2^gl) + v_new^T kg        4 x m64n128k16, B N-major (kg rows as stored)
//   o^T      = O1 + v_new^T Aqk^T                 4 x m64n64k16 into O1's accumulators, B K-major
// The w / qg / kg / Aqk tiles in 128-byte swizzled layouts: rows of 64 bf16 (128 B), the 16-byte piece p of row r at
// piece p ^ (r % 8), 8-row atoms of 1024 B (1024-byte aligned), a 128-channel row split in two halves. So a quarter
// warp copies one row's 128 contiguous bytes into all 32 banks (the no-swizzle core-matrix layouts cost 16-byte L2
// requests, half a sector each: 2.46 GB through L2 at B2 T8192 H32 against 1.13 GB; 2026-11-29_state64, call 3).
constexpr int C64 = 64;                                   // tokens per chunk
constexpr int X_WQ = 2 * C64 * D * 2;                     // [w ; qg]: channel half h, token n (w 0-63, qg 64-127)
                                                          //   at h 16384 + n 128 (K-major B: SBO 1024)
constexpr int X_KG = C64 * D * 2;                         // kg: channel half h, token t at h 8192 + t 128
                                                          //   (N-major B: LBO 8192, SBO 1024)
constexpr int X_AQK = C64 * C64 * 2;                      // Aqk: row i at i 128 (K-major B: SBO 1024)
constexpr int X_GL = 1024;                                // the decay: 128 fp32, padded to keep stages aligned
// WGS consumer warpgroups per CTA, each owning 64 state columns: 1 (a CTA per 64 columns, 3 stages) or 2 (a CTA per
// head, the w / qg / kg / Aqk tiles loaded once for both halves, 2 stages: 3 would not fit)
template <int WGS> constexpr int x_upad() { return 64 * WGS + 8; }        // bf16 row stride of the u and o tiles
template <int WGS> constexpr int x_u() { return C64 * x_upad<WGS>() * 2; }  // u: 64 tokens x 64 WGS (+8 pad)
template <int WGS> constexpr int x_stage() { return X_WQ + X_KG + X_AQK + x_u<WGS>() + X_GL; }
#ifndef KDA_STATE64_STAGES
#define KDA_STATE64_STAGES 3  // chunks in flight (210432 B of shared memory); H200, B2 T8192 H32: 2 stages 493 us,
                              // 3 stages 464 us (docs/benchmarks/runs/2026-11-28_state64)
#endif
template <int WGS> constexpr int x_stages() { return WGS == 1 ? KDA_STATE64_STAGES : 2; }  // 2 x 75264 B with 2

template <int WGS>
__global__ void __launch_bounds__(128 * WGS, 1) kda_state64_fwd_kernel(const State64Args a) {
#if defined(KDA_WGMMA)
    constexpr int BV = 64, THREADS = 128 * WGS, X_UPAD = x_upad<WGS>(), X_U = x_u<WGS>(), X_STAGE = x_stage<WGS>();
    constexpr int X_STAGES = x_stages<WGS>(), PW = 1024 / THREADS, PA = 512 / THREADS, PU = 64 * WGS * 8 / THREADS;
    extern __shared__ __align__(1024) unsigned char smem_sw[];  // the swizzled tiles need 1024-byte alignment
    unsigned char* smem = smem_sw;
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, tid = threadIdx.x;
    const int64_t n = blockIdx.x / (D / BV / WGS);
    const int64_t vb = WGS == 2 ? threadIdx.x >> 7 : blockIdx.x % (D / BV);  // this warpgroup's 64 columns
    const int64_t hv = blockIdx.y, HV = a.HV;
    const int64_t bos = a.cu_seqlens[n], len = a.cu_seqlens[n + 1] - bos;
    const int64_t nch = (len + C64 - 1) / C64, c_first = a.chunk_offsets[n];

    // each thread's 16-byte pieces of a stage: [w ; qg] and kg PW each (rows rw0 + j RW, channels pw ..), Aqk PA
    // (rows ra0 + j RA), u and o PU (rows ru0 + j RU), gl one (threads 0-31). Global element offsets inside a chunk's
    // tiles are int32 (64 rows x HV x D < 2^31, checked at launch), added to bases formed once per chunk.
    constexpr int RW = THREADS / 16, RA = THREADS / 8, RU = THREADS / (8 * WGS);
    const int rw0 = tid / 16, pw = (tid % 16) * 8, ra0 = tid / 8, pa = (tid % 8) * 8;
    const int ru0 = tid / (8 * WGS), pu = (tid % (8 * WGS)) * 8;
    const int32_t sw = static_cast<int32_t>(HV * D), sa = static_cast<int32_t>(HV * C64);
    // shared-memory offsets of piece 0 (piece j: + j RW 128, + j RA 128); RW, RA are multiples of 8, so r % 8 and the
    // swizzle stay a thread's own
    const int hw = pw / 64, sw8 = ((pw / 8) % 8) ^ (rw0 % 8);
    const uint32_t o_w = hw * 16384 + rw0 * 128 + sw8 * 16, o_k = X_WQ + hw * 8192 + rw0 * 128 + sw8 * 16;
    const uint32_t o_a = X_WQ + X_KG + ra0 * 128 + ((pa / 8) ^ (ra0 % 8)) * 16;
    const uint32_t o_u = X_WQ + X_KG + X_AQK + (ru0 * X_UPAD + pu) * 2;                     // + j RU X_UPAD 2
    // u's (and o's) first column in the CTA's tile: the whole head with two warpgroups, else this block's
    const int64_t v_cta = WGS == 2 ? 0 : vb * BV;
    const uint32_t smem0 = smem_addr(smem);
    if ((smem0 & 1023) != 0) __trap();  // the dynamic shared memory starts aligned (no static shared memory here)
    auto load_stage = [&](int64_t c, int st) {
        const uint32_t base = smem0 + st * X_STAGE;
        const int64_t row0 = (bos + c * C64) * HV + hv;  // the chunk's first token row of this head
        const int rows = static_cast<int>(min(len - c * C64, static_cast<int64_t>(C64)));
        const __nv_bfloat16 *gw = a.w + row0 * D + pw, *gq = a.qg + row0 * D + pw, *gk = a.kg + row0 * D + pw;
        const __nv_bfloat16 *ga = a.aqk + row0 * C64 + pa, *gu = a.u + row0 * D + v_cta + pu;
        // a full chunk copies plainly; the last one of a sequence zero-fills the rows past its end
        auto pieces = [&](bool full) {
            auto copy = [&](uint32_t dst, const __nv_bfloat16* src, bool ok) {
                if (full) cp_async16_to(dst, src);
                else cp_async16_zfill(dst, src, ok);
            };
#pragma unroll
            for (int j = 0; j < PW; ++j) {
                const bool ok = full || rw0 + j * RW < rows;
                const int32_t e = ok ? (rw0 + j * RW) * sw : 0;
                copy(base + o_w + j * RW * 128, gw + e, ok);
                copy(base + o_w + j * RW * 128 + C64 * 128, gq + e, ok);
                copy(base + o_k + j * RW * 128, gk + e, ok);
            }
#pragma unroll
            for (int j = 0; j < PA; ++j) {
                const bool ok = full || ra0 + j * RA < rows;
                copy(base + o_a + j * RA * 128, ga + (ok ? (ra0 + j * RA) * sa : 0), ok);
            }
#pragma unroll
            for (int j = 0; j < PU; ++j) {
                const bool ok = full || ru0 + j * RU < rows;
                copy(base + o_u + j * RU * X_UPAD * 2, gu + (ok ? (ru0 + j * RU) * sw : 0), ok);
            }
        };
        if (rows == C64) pieces(true);
        else pieces(false);
        if (tid < D / 4) cp_async16_to(base + X_WQ + X_KG + X_AQK + X_U + tid * 16,
                                       a.gl + ((c_first + c) * HV + hv) * D + tid * 4);
    };

    // s[nt][e] = S^T[v, k], v = 16 warp + gi (+8 for e >= 2), k = 8 nt + gj (+1 for odd e)
    const int gi = lane >> 2, gj = (lane & 3) * 2;
    const int64_t v0 = vb * BV + warp * 16 + gi;
    const int64_t state = (n * HV + hv) * D * D;
    float s[16][4];
    load_state(a.h0, a.v_first, state, v0, gj, s);

#pragma unroll
    for (int st = 0; st < X_STAGES - 1; ++st) {
        if (st < nch) load_stage(st, st);
        cp_async_commit();
    }
    __nv_bfloat16* so = reinterpret_cast<__nv_bfloat16*>(smem + X_STAGES * X_STAGE);  // [64, X_UPAD] output tile
    // the stage-0 descriptors; a stage's are these plus its offset (addresses in 16-byte units, below 2^14)
    const uint64_t d_wq0 = smem_desc_sw128(smem, 16, 1024), d_kg0 = smem_desc_sw128(smem + X_WQ, 8192, 1024),
                   d_aq0 = smem_desc_sw128(smem + X_WQ + X_KG, 16, 1024);
    // ldmatrix / stmatrix rows of a thread in a 16-token block of the u and o tiles
    const int lm_row = ((lane >> 4) << 3) + (lane & 7);
    const int lm_col = static_cast<int>(vb * BV - v_cta) + warp * 16 + ((lane >> 3) & 1) * 8;

    for (int64_t c = 0; c < nch; ++c) {
        cp_async_wait<X_STAGES - 2>();
        fence_async_smem();  // the cp.async writes (generic proxy) before wgmma reads them (async proxy)
        __syncthreads();
        if (c + X_STAGES - 1 < nch) load_stage(c + X_STAGES - 1, static_cast<int>((c + X_STAGES - 1) % X_STAGES));
        cp_async_commit();
        const int st = static_cast<int>(c % X_STAGES);
        const unsigned char* base = smem + st * X_STAGE;
        const __nv_bfloat16* su = reinterpret_cast<const __nv_bfloat16*>(base + X_WQ + X_KG + X_AQK);
        float* sgl = reinterpret_cast<float*>(smem + st * X_STAGE + X_WQ + X_KG + X_AQK + X_U);
        if (tid < D) sgl[tid] = exp2f(sgl[tid]);  // the chunk's decay 2^gl, once per k (read after the next barrier)
        const uint64_t d_st = static_cast<uint64_t>(st * X_STAGE) >> 4;

        // [P | O1] = S^T [w ; qg]^T: accumulator n-tiles 0-7 are P (tokens 0-63), 8-15 are O1
        float pq[16][4];
        uint32_t fs[8][4];
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            fs[kk][0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
            fs[kk][1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
            fs[kk][2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            fs[kk][3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        }
        fence_operands<32>(&fs[0][0]);
        wg_fence();
        fence_operands<64>(&pq[0][0]);
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {  // 16 channels: 32 bytes into a row of channel half kk / 4
            wgmma_n128<0>(pq, fs[kk], d_wq0 + d_st + ((kk / 4) * 16384 + (kk % 4) * 32) / 16, kk > 0);
        }
        wg_commit();
        // u^T [v, token] in the accumulator layout while the products run: the u tile read transposed, one ldmatrix
        // per 16-token block; fu[b][q]: v-rows (q & 1) 8 + gi, tokens 16 b + (q >> 1) 8 + gj, + 1
        uint32_t fu[4][4];
#pragma unroll
        for (int b = 0; b < 4; ++b) ldsm_x4_t(fu[b], su + (16 * b + lm_row) * X_UPAD + lm_col);
        wg_wait0();
        fence_operands<64>(&pq[0][0]);
        fence_operands<32>(&fs[0][0]);

        // v_new^T = u^T - P as the bf16 A operand (64 v-rows x 64 tokens: four k16 blocks); S^T <- S^T diag(2^gl)
        uint32_t fv[4][4];
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            float vn[2][4];
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const float2 x = unpack_bf16(fu[b][q]);
                const int nt = 2 * b + (q >> 1), e = (q & 1) * 2;
                vn[q >> 1][e] = x.x - pq[nt][e];
                vn[q >> 1][e + 1] = x.y - pq[nt][e + 1];
            }
#pragma unroll
            for (int i = 0; i < 2; ++i) {
#pragma unroll
                for (int e = 0; e < 4; ++e) vn[i][e] = fabsf(vn[i][e]) < INFINITY ? vn[i][e] : 0.0f;
            }
            fv[b][0] = pack_bf16(vn[0][0], vn[0][1]);
            fv[b][1] = pack_bf16(vn[0][2], vn[0][3]);
            fv[b][2] = pack_bf16(vn[1][0], vn[1][1]);
            fv[b][3] = pack_bf16(vn[1][2], vn[1][3]);
        }
        __syncthreads();  // the decay in shared memory
#pragma unroll
        for (int nt = 0; nt < 16; ++nt) {
            const float2 d = *reinterpret_cast<const float2*>(sgl + nt * 8 + gj);
            const float d0 = d.x, d1 = d.y;
            s[nt][0] *= d0; s[nt][1] *= d1; s[nt][2] *= d0; s[nt][3] *= d1;
        }
        // S^T += v_new^T kg;  O2 = v_new^T Aqk^T (its own accumulators), o^T = O1 + O2
        float oo[8][4];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
#pragma unroll
            for (int e = 0; e < 4; ++e) oo[i][e] = 0.0f;
        }
        wg_fence();
        fence_operands<64>(&s[0][0]);
        fence_operands<32>(&oo[0][0]);
        fence_operands<16>(&fv[0][0]);
#pragma unroll
        for (int b = 0; b < 4; ++b) wgmma_n128<1>(s, fv[b], d_kg0 + d_st + b * 2048 / 16, 1);  // 16 tokens
#pragma unroll
        for (int b = 0; b < 4; ++b) wgmma_n64_acc(oo, fv[b], d_aq0 + d_st + b * 32 / 16);  // 16 columns j
        wg_commit();
        wg_wait0();
        fence_operands<64>(&s[0][0]);
        fence_operands<32>(&oo[0][0]);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
#pragma unroll
            for (int e = 0; e < 4; ++e) oo[i][e] += pq[8 + i][e];
        }
        // o^T [v, token] out transposed into the [token, v] tile, a 16-token block per stmatrix
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            stsm_x4_t(so + (16 * b + lm_row) * X_UPAD + lm_col, pack_bf16(oo[2 * b][0], oo[2 * b][1]),
                      pack_bf16(oo[2 * b][2], oo[2 * b][3]), pack_bf16(oo[2 * b + 1][0], oo[2 * b + 1][1]),
                      pack_bf16(oo[2 * b + 1][2], oo[2 * b + 1][3]));
        }
        __syncthreads();
        const int rows = static_cast<int>(min(len - c * C64, static_cast<int64_t>(C64)));
        __nv_bfloat16* go = a.o + ((bos + c * C64) * HV + hv) * D + v_cta + pu;
#pragma unroll
        for (int j = 0; j < PU; ++j) {  // 16-byte pieces of o: rows ru0 + j RU, columns pu ..
            if (ru0 + j * RU < rows) {
                *reinterpret_cast<uint4*>(go + (ru0 + j * RU) * sw) =
                    *reinterpret_cast<const uint4*>(so + (ru0 + j * RU) * X_UPAD + pu);
            }
        }
    }
    cp_async_wait<0>();
    if (a.ht != nullptr) store_state(a.ht, a.v_first, state, v0, gj, s);
#endif
}

// ---------------------------------------------------------------------------------------------------------------
// The intra stage over 64-token chunks (entry point kda_intra64_fwd; backend sm90_v2): Triton's intra forward's
// outputs at BT = 64 (`triton_kda.wy.IntraOut`: token-major qg, kg, w, u, Aqk over the chunk's 64 columns, gl), which
// `kda_state64_fwd_kernel` walks. Grid (NT, HV), a CTA of four warps per 64-token chunk and v-head; warp I owns the
// chunk's rows [16 I, 16 I + 16) (block I) and a = 16 I, the block's first row, is its anchor:
//   G = the gate cumsum from the chunk's first token (log2 units): block sums, then the earlier blocks' totals;
//   Aqk[i, j] = (scale q_i e^{G_i - G_a}) . (k_j e^{G_a - G_j}), L[i, j] = beta_i (k_i e^{G_i - G_a}) . (k_j e^{G_a - G_j}):
//       an earlier block's factors are all <= 1 where the gate decays; the own block's grow to at most e^{range}, and
//       a block whose range passes RANGE_MAX sums its own block exactly, term by term (as the 16-token kernel);
//   T = (I + L)^-1 by blocks in fp32: T_II by forward substitution, T_IJ = -T_II sum_{J <= M < I} L_IM T_MJ;
//   w = T diag(beta) (k e^{G}), u = T diag(beta) v, qg = scale q e^{G}, kg = k e^{G_last - G}, gl = G_last.
// Shared memory (75648 B, three CTAs an SM; no array of tiles lives in registers across the column blocks, which
// spilled 530 MB at B2 T8192 H32, 2026-11-29_intra64 call 2): R1 holds G (fp32 [64, 128], `gsw`), later the diagonal
// blocks of L (fp32 [16, 17] each) and the inverse's scratch (fp32 [16, 16] a warp) before v, then T diag(beta) (bf16
// [64, TPAD]); Q holds q, then k e^{G} (w's operand); K holds k, then T (fp32 [64, 64]); LO the six blocks of L below
// the diagonal (fp32 [16, 17], block (I, J) at I (I - 1) / 2 + J); then a staging tile a warp (first the blocks'
// gate totals), the rows' k norms and betas.
constexpr int LPAD = 17;                                     // fp32 row stride of a 16 x 16 block of L (as
                                                             // `unit_lower_inverse_column` reads it)
constexpr int TPAD = 72;                                     // bf16 row stride of T diag(beta) (conflict-free ldmatrix)
constexpr int I64_R1 = C64 * D * 4, I64_SCR = 4 * BT * LPAD * 4, I64_V = C64 * D * 2;
constexpr int I64_Q = I64_R1, I64_K = I64_Q + C64 * D * 2, I64_LO = I64_K + C64 * D * 2;
constexpr int I64_ST = I64_LO + 6 * BT * LPAD * 4, I64_RK = I64_ST + 4 * BT * SPAD * 2, I64_BETA = I64_RK + C64 * 4;
constexpr int I64_SMEM = I64_BETA + C64 * 4;
static_assert(I64_SCR + 4 * BT * BT * 4 <= I64_V && C64 * TPAD * 2 <= I64_V && 2 * I64_V == I64_R1, "R1 layout");
static_assert(4 * D * 4 <= 4 * BT * SPAD * 2, "the gate totals fit the staging tiles");

// element offset of G[r, c] in R1: 16-byte pieces XOR-swizzled by row (the column blocks' float2 reads of eight rows
// meet no bank twice)
__device__ __forceinline__ int gsw(int r, int c) { return r * D + ((((c >> 2) ^ (r & 7))) << 2) + (c & 3); }

// the exact path of kda_intra64_fwd_kernel's diagonal block (a gate range past RANGE_MAX): Aqk and L of the block's
// own 16 x 16 in accumulator layout, sum_d q_i k_j e^{G_i - G_j} with the exponent <= 0 (j <= i), one exp2 per term,
// q from global (the block's first row at q0, rows qld apart), k and G from shared memory; out of line, so the
// column-block loop stays small (its arguments plain values: a reference to the kernel's argument block put the block
// in local memory)
__device__ __noinline__ void exact_block(const __nv_bfloat16* q0, int64_t qld, const float* sG,
                                         const __nv_bfloat16* sk, const float* srk, float rq0, float rq1, float rk0,
                                         float rk1, int r0, int brows, int lane, float (&aqk)[2][4],
                                         float (&lkk)[2][4]) {
    const int gi = lane >> 2, gj = (lane & 3) * 2;
    for (int n = 0; n < 2; ++n) {
        for (int e = 0; e < 4; ++e) {
            const int i = gi + (e >> 1) * 8, j = n * 8 + gj + (e & 1);
            float s1 = 0.0f, s2 = 0.0f;
            if (j <= i && i < brows) {
                const __nv_bfloat16* qi = q0 + i * qld;
                for (int d = 0; d < D; ++d) {
                    const float f = exp2f(fminf(sG[gsw(r0 + i, d)] - sG[gsw(r0 + j, d)], 0.0f));
                    const float kd = __bfloat162float(sk[swz(r0 + j, d)]) * f;
                    s1 += __bfloat162float(qi[d]) * kd;
                    s2 += __bfloat162float(sk[swz(r0 + i, d)]) * kd;
                }
            }
            aqk[n][e] = s1 * (e >> 1 ? rq1 : rq0) * srk[r0 + j];
            lkk[n][e] = s2 * (e >> 1 ? rk1 : rk0) * srk[r0 + j];
        }
    }
}

#ifndef KDA_I64_MIN_BLOCKS
#define KDA_I64_MIN_BLOCKS 3  // CTAs per SM the register allocation targets (three fit the shared memory)
#endif

template <int GATE, bool G_F32>
__global__ void __launch_bounds__(128, KDA_I64_MIN_BLOCKS) kda_intra64_fwd_kernel(const Intra64Args a) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t ci = blockIdx.x, hv = blockIdx.y;
    const int64_t h = hv / (a.HV / a.H);
    const int64_t seq = a.chunk_indices[2 * ci], local = a.chunk_indices[2 * ci + 1];
    const int64_t t0 = a.cu_seqlens[seq] + C64 * local;
    const int nvalid = static_cast<int>(min(static_cast<int64_t>(C64), a.cu_seqlens[seq + 1] - t0));
    const int r0 = warp * BT;                                 // this warp's first row
    const int brows = max(0, min(BT, nvalid - r0));           // its rows inside the sequence
    const int gi = lane >> 2, gj = (lane & 3) * 2;

    float* sG = reinterpret_cast<float*>(smem);
    float* sLd = reinterpret_cast<float*>(smem) + warp * BT * LPAD;  // this warp's diagonal block of L
    float* scratch = reinterpret_cast<float*>(smem + I64_SCR) + warp * BT * BT;
    __nv_bfloat16* sv = reinterpret_cast<__nv_bfloat16*>(smem + I64_V);
    __nv_bfloat16* sA = reinterpret_cast<__nv_bfloat16*>(smem);
    __nv_bfloat16* sq = reinterpret_cast<__nv_bfloat16*>(smem + I64_Q);  // q, then k e^{G}
    __nv_bfloat16* sk = reinterpret_cast<__nv_bfloat16*>(smem + I64_K);
    float* sT = reinterpret_cast<float*>(smem + I64_K);
    float* sLo = reinterpret_cast<float*>(smem + I64_LO);
    __nv_bfloat16* st0 = reinterpret_cast<__nv_bfloat16*>(smem + I64_ST) + warp * BT * SPAD;
    float* stot = reinterpret_cast<float*>(smem + I64_ST);
    float* srk = reinterpret_cast<float*>(smem + I64_RK);
    float* sbeta = reinterpret_cast<float*>(smem + I64_BETA);

    // 0. q and k rows of this block (rows past the sequence end zero-filled), landing while the gate pass runs
    rows_async<true>(sq, a.q, sk, a.k, t0, r0, nvalid, a.H, h, lane);
    cp_async_commit();

    // 1. gate and the block's cumsum (log2 units; lane owns columns c0..c0+3), the block's totals, its range
    const int c0 = lane * 4;
    float acc[4];
    float range = gate_block<GATE, G_F32>(a.g, a.A_log, a.dt_bias, a.lower_bound, t0, r0, nvalid, a.HV, hv, c0, acc,
                                          [&](int t, const float (&x)[4]) {
        *reinterpret_cast<float4*>(sG + gsw(r0 + t, c0)) = make_float4(x[0], x[1], x[2], x[3]);
    });
    *reinterpret_cast<float4*>(stot + warp * D + c0) = make_float4(acc[0], acc[1], acc[2], acc[3]);
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) range = fmaxf(range, __shfl_xor_sync(0xffffffffu, range, m));
    const bool exact = !(range <= RANGE_MAX);  // NaN-safe: a NaN range takes the exact path

    // beta (activated; zero on padded rows), kept by lanes 0..15 and in shared memory
    float beta = 0.0f;
    if (lane < BT && lane < brows) {
        beta = load_scalar(a.beta, (t0 + r0 + lane) * a.HV + hv, a.beta_fp32);
        if (a.beta_sigmoid) beta = a.beta_scale / (1.0f + __expf(-beta));
    }
    if (lane < BT) sbeta[r0 + lane] = beta;
    cp_async_wait<0>();
    __syncthreads();

    // 2. G from the chunk's first token (the earlier blocks' totals added in block order); gl from the last block
    {
        float off[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int J = 0; J < warp; ++J) {
            const float4 x = *reinterpret_cast<const float4*>(stot + J * D + c0);
            off[0] += x.x; off[1] += x.y; off[2] += x.z; off[3] += x.w;
        }
#pragma unroll 4
        for (int t = 0; t < BT; ++t) {
            float4* p = reinterpret_cast<float4*>(sG + gsw(r0 + t, c0));
            float4 x = *p;
            x.x += off[0]; x.y += off[1]; x.z += off[2]; x.w += off[3];
            *p = x;
            if (warp == 3 && t == BT - 1) *reinterpret_cast<float4*>(a.gl + (ci * a.HV + hv) * D + c0) = x;
        }
    }

    // q and k fragments of this block (A-operand layout, k-step kk) and the rows' norms (q's carries the scale)
    uint32_t qf[8][4], kf[8][4];
    {
        const int r = r0 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
            ldsm_x4(qf[kk], sq + swz(r, kk * 16 + (lane >> 4) * 8));
            ldsm_x4(kf[kk], sk + swz(r, kk * 16 + (lane >> 4) * 8));
        }
    }
    float rq[2], rk[2];
    row_norms(qf, kf, a.l2norm, a.scale, rq, rk);
    if ((lane & 3) == 0) {
        srk[r0 + gi] = rk[0];
        srk[r0 + gi + 8] = rk[1];
    }
    __syncthreads();  // G, the k norms; every warp has its q fragments (Q is overwritten below)

    // 3. own rows: qg, kg to global, k e^{G} over q in Q, and the anchored A operands in place of the fragments
    const int64_t ld = a.HV * D, row0 = (t0 + r0) * a.HV + hv;  // this block's first row in the [TT, HV, ...] outputs
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        uint32_t oq[4], ok[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int row = r0 + gi + (e & 1) * 8, col = kk * 16 + (e >> 1) * 8 + gj;
            const float2 G = *reinterpret_cast<const float2*>(sG + gsw(row, col));
            const float2 Ga = *reinterpret_cast<const float2*>(sG + gsw(r0, col));
            const float2 GL = *reinterpret_cast<const float2*>(sG + gsw(C64 - 1, col));
            const float2 x = unpack_bf16(qf[kk][e]), y = unpack_bf16(kf[kk][e]);
            const float qs0 = x.x * rq[e & 1], qs1 = x.y * rq[e & 1];
            const float ks0 = y.x * rk[e & 1], ks1 = y.y * rk[e & 1];
            const float e0 = fast_exp2(G.x), e1 = fast_exp2(G.y);
            oq[e] = pack_bf16(qs0 * e0, qs1 * e1);
            ok[e] = pack_bf16(ks0 * fast_exp2(GL.x - G.x), ks1 * fast_exp2(GL.y - G.y));
            *reinterpret_cast<uint32_t*>(sq + swz(row, col)) = pack_bf16(ks0 * e0, ks1 * e1);
            const float a0 = fast_exp2(G.x - Ga.x), a1 = fast_exp2(G.y - Ga.y);
            qf[kk][e] = pack_bf16(qs0 * a0, qs1 * a1);
            kf[kk][e] = pack_bf16(ks0 * a0, ks1 * a1);
        }
        store_tile(st0, oq, a.qg + row0 * D + kk * 16, ld, lane, brows);
        store_tile(st0, ok, a.kg + row0 * D + kk * 16, ld, lane, brows);
    }

    // 4. Aqk and L over column blocks J <= I (columns k_j rk_j e^{G_a - G_j} from K): Aqk to global (zero tiles right
    //    of the diagonal block), beta_i L to LO below the diagonal; the diagonal block last and apart, its L in
    //    registers (R1 holds G yet), so that no tile lives in registers across the loop
    auto products = [&](int J, float (&aqk)[2][4], float (&lkk)[2][4]) {
        const int rb = J * BT + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
            uint32_t kb[4], fi[4];
            ldsm_x4(kb, sk + swz(rb, kk * 16 + (lane >> 4) * 8));
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int j = J * BT + gi + (e & 1) * 8, col = kk * 16 + (e >> 1) * 8 + gj;
                const float2 G = *reinterpret_cast<const float2*>(sG + gsw(j, col));
                const float2 Ga = *reinterpret_cast<const float2*>(sG + gsw(r0, col));
                const float2 y = unpack_bf16(kb[e]);
                const float s = srk[j];
                fi[e] = pack_bf16(y.x * s * fast_exp2(fminf(Ga.x - G.x, RANGE_MAX)),
                                  y.y * s * fast_exp2(fminf(Ga.y - G.y, RANGE_MAX)));
            }
            // B fragments of the column tokens: n-tile 0 is rows 0-7 (e = 0, 2), n-tile 1 rows 8-15 (e = 1, 3)
            mma(aqk[0], qf[kk], fi[0], fi[2]);
            mma(aqk[1], qf[kk], fi[1], fi[3]);
            mma(lkk[0], kf[kk], fi[0], fi[2]);
            mma(lkk[1], kf[kk], fi[1], fi[3]);
        }
    };
    // the masks: Aqk's tile (j <= i, valid rows) to global, beta_i L[i, j] (j < i) to lt
    auto finish = [&](int J, const float (&aqk)[2][4], const float (&lkk)[2][4], float (&lt)[2][4]) {
        uint32_t oa[4];
#pragma unroll
        for (int n = 0; n < 2; ++n) {
#pragma unroll
            for (int hrow = 0; hrow < 2; ++hrow) {
                const int i = r0 + gi + hrow * 8, j = J * BT + n * 8 + gj;
                const bool vi = i < nvalid;
                const float bi = __shfl_sync(0xffffffffu, beta, gi + hrow * 8);
                oa[2 * n + hrow] = pack_bf16(vi && j <= i ? aqk[n][2 * hrow] : 0.0f,
                                             vi && j + 1 <= i ? aqk[n][2 * hrow + 1] : 0.0f);
                lt[n][2 * hrow] = j < i ? bi * lkk[n][2 * hrow] : 0.0f;
                lt[n][2 * hrow + 1] = j + 1 < i ? bi * lkk[n][2 * hrow + 1] : 0.0f;
            }
        }
        store_tile(st0, oa, a.aqk + row0 * C64 + J * BT, a.HV * C64, lane, brows);
    };
#pragma unroll 1
    for (int J = 0; J < warp; ++J) {
        float aqk[2][4] = {}, lkk[2][4] = {}, lt[2][4];
        products(J, aqk, lkk);
        finish(J, aqk, lkk, lt);
        float* lo = sLo + (warp * (warp - 1) / 2 + J) * BT * LPAD;
#pragma unroll
        for (int n = 0; n < 2; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) lo[(gi + (e >> 1) * 8) * LPAD + n * 8 + gj + (e & 1)] = lt[n][e];
        }
    }
    float ldiag[2][4];
    {
        float aqk[2][4] = {}, lkk[2][4] = {};
        products(warp, aqk, lkk);
        if (exact) {
            float ea[2][4], el[2][4];
            exact_block(a.q + ((t0 + r0) * a.H + h) * D, a.H * D, sG, sk, srk, rq[0], rq[1], rk[0], rk[1], r0, brows,
                        lane, ea, el);
#pragma unroll
            for (int n = 0; n < 2; ++n) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    aqk[n][e] = ea[n][e];
                    lkk[n][e] = el[n][e];
                }
            }
        }
        finish(warp, aqk, lkk, ldiag);
    }
    for (int J = warp + 1; J < 4; ++J) {
        const uint32_t zero[4] = {0u, 0u, 0u, 0u};
        store_tile(st0, zero, a.aqk + row0 * C64 + J * BT, a.HV * C64, lane, brows);
    }
    __syncthreads();  // G and k are dead

    // 5. the diagonal block of beta_i L over G, v into R1 behind it (landing while the inverse runs)
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) sLd[(gi + (e >> 1) * 8) * LPAD + n * 8 + gj + (e & 1)] = ldiag[n][e];
    }
    rows_async<false>(sv, a.v, nullptr, nullptr, t0, r0, nvalid, a.HV, hv, lane);
    cp_async_commit();
    __syncwarp();

    // 6. T = (I + L)^-1 in fp32 into K: T_II by forward substitution (lane c < 16 builds column c), then the blocks
    //    below the diagonal by distance r = I - J: T_IJ = -T_II P, P = sum_{J <= M < I} L_IM T_MJ (lane: row l / 2,
    //    columns 8 (l % 2) ..)
    {
        const int c = lane & 15;
        float x[BT];
        unit_lower_inverse_column(sLd, c, x);
        if (lane < BT) {
#pragma unroll
            for (int i = 0; i < BT; ++i) sT[(r0 + i) * C64 + r0 + c] = x[i];
        }
    }
    __syncthreads();
    {
        const int pr = lane >> 1, pc = (lane & 1) * 8;
        for (int r = 1; r < 4; ++r) {
            if (warp >= r) {
                const int J = warp - r;
                float p[8] = {};
                for (int M = J; M < warp; ++M) {
                    for (int m = 0; m < BT; ++m) {
                        const float l = sLo[((warp * (warp - 1) / 2 + M) * BT + pr) * LPAD + m];
                        const float* t = sT + (M * BT + m) * C64 + J * BT + pc;
#pragma unroll
                        for (int e = 0; e < 8; ++e) p[e] += l * t[e];
                    }
                }
#pragma unroll
                for (int e = 0; e < 8; ++e) scratch[pr * BT + pc + e] = p[e];
                __syncwarp();
                float t[8] = {};
                for (int m = 0; m <= pr; ++m) {
                    const float l = sT[(r0 + pr) * C64 + r0 + m];
#pragma unroll
                    for (int e = 0; e < 8; ++e) t[e] -= l * scratch[m * BT + pc + e];
                }
#pragma unroll
                for (int e = 0; e < 8; ++e) sT[(r0 + pr) * C64 + J * BT + pc + e] = t[e];
                __syncwarp();
            }
            __syncthreads();
        }
    }

    // 7. T diag(beta) as bf16 over L (lower triangle; a non-finite entry zero, as Triton's inverse), v landed
    for (int i = lane; i < BT * C64; i += 32) {
        const int r = r0 + i / C64, c = i % C64;
        const float x = c <= r ? sT[r * C64 + c] * sbeta[c] : 0.0f;
        sA[r * TPAD + c] = __float2bfloat16_rn(fabsf(x) < INFINITY ? x : 0.0f);
    }
    cp_async_wait<0>();
    __syncthreads();

    // 8. w = T diag(beta) (k e^{G}), u = T diag(beta) v over the column blocks J <= I, stored from the accumulators
    {
        const int r = (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int np = 0; np < D / 16; ++np) {
            const int c = np * 16 + (lane >> 4) * 8;
            float cw[2][4] = {}, cu[2][4] = {};
#pragma unroll
            for (int J = 0; J < 4; ++J) {
                if (J <= warp) {
                    uint32_t fa[4], fx[4], fv[4];
                    ldsm_x4(fa, tile_a(sA + r0 * TPAD, TPAD, J * BT, lane));
                    ldsm_x4_t(fx, sq + swz(J * BT + r, c));
                    ldsm_x4_t(fv, sv + swz(J * BT + r, c));
                    wu_mma(cw, cu, fa, fx, fv);
                }
            }
            uint32_t ow[4], ou[4];
            pack_tile(cw, ow);
            pack_tile(cu, ou);
            store_tile(st0, ow, a.w + row0 * D + np * 16, ld, lane, brows);
            store_tile(st0, ou, a.u + row0 * D + np * 16, ld, lane, brows);
        }
    }
}

template <int WGS>
constexpr int k64_smem_bytes() { return x_stages<WGS>() * x_stage<WGS>() + C64 * x_upad<WGS>() * 2; }

constexpr int k2_wgmma_smem_bytes() { return K2_STAGES * W_STAGE + BT * (64 + 8) * 2; }

template <int BV>
constexpr int k2_smem_bytes() { return K2_STAGES * K2_STAGE_BYTES + BT * (BV + 8) * 2; }

}  // namespace

// host side: validation (nothing reaches a kernel unless every pointer is device memory of the current device,
// aligned, and every size fits the grids), then the two launches on the caller's stream (or the pieces' launches)

// The intra stage over every chunk (pieces <= 1) or over chunks [a.chunk_lo, a.chunk_hi) of each sequence.
static cudaError_t launch_intra(const FwdArgs& a, int64_t blocks, cudaStream_t s, char* msg, int len) {
    void (*intra)(const FwdArgs) = nullptr;
    if (a.gate == 0) intra = a.g_fp32 ? kda_intra_fwd_kernel<0, true> : kda_intra_fwd_kernel<0, false>;
    else if (a.gate == 1) intra = a.g_fp32 ? kda_intra_fwd_kernel<1, true> : kda_intra_fwd_kernel<1, false>;
    else intra = a.g_fp32 ? kda_intra_fwd_kernel<2, true> : kda_intra_fwd_kernel<2, false>;
    const int smem = K1_WARPS * K1_WARP_BYTES;
    cudaError_t e = cudaFuncSetAttribute(intra, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) {
        snprintf(msg, len, "kda_fwd: cudaFuncSetAttribute(intra, %d B): %s", smem, cudaGetErrorString(e));
        return e;
    }
    intra<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(a.HV)), K1_WARPS * 32, smem, s>>>(a);
    if ((e = cudaGetLastError()) != cudaSuccess) snprintf(msg, len, "kda_fwd: intra launch: %s", cudaGetErrorString(e));
    return e;
}

// The recurrence over every chunk (pieces <= 1) or over chunks [a.chunk_lo, a.chunk_hi) of each sequence (h0 -> ht:
// the state before and after them).
static cudaError_t launch_state(const FwdArgs& a, cudaStream_t s, char* msg, int len) {
    const int64_t vblocks = D / a.block_v;
    const dim3 grid = a.seq_order != nullptr ? dim3(static_cast<unsigned>(a.N * a.HV * vblocks))
                                             : dim3(static_cast<unsigned>(a.N * vblocks), static_cast<unsigned>(a.HV));
    cudaError_t e;
    if (a.state_wgmma) {
#if defined(__CUDA_ARCH_LIST__) && __CUDA_ARCH_LIST__ == 900
        const int smem = k2_wgmma_smem_bytes();
        e = cudaFuncSetAttribute(kda_state_fwd_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e == cudaSuccess) {
            kda_state_fwd_wgmma_kernel<<<grid, 128, smem, s>>>(a);
            e = cudaGetLastError();
        }
#else
        snprintf(msg, len, "kda_fwd: the wgmma recurrence is in the sm_90a library only");
        return cudaErrorNotSupported;
#endif
    } else if (a.block_v == 64) {
        const int smem = k2_smem_bytes<64>();
        e = cudaFuncSetAttribute(kda_state_fwd_kernel<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e == cudaSuccess) {
            kda_state_fwd_kernel<64><<<grid, 128, smem, s>>>(a);
            e = cudaGetLastError();
        }
    } else {
        const int smem = k2_smem_bytes<32>();
        e = cudaFuncSetAttribute(kda_state_fwd_kernel<32>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e == cudaSuccess) {
            kda_state_fwd_kernel<32><<<grid, 64, smem, s>>>(a);
            e = cudaGetLastError();
        }
    }
    if (e != cudaSuccess) snprintf(msg, len, "kda_fwd: state launch: %s", cudaGetErrorString(e));
    return e;
}

// The first chunk of piece p of P over nch chunks, piece sizes in ratio taper (1: equal): nch (1 - r^p) / (1 - r^P),
// rounded; piece P starts at nch.
static int64_t piece_start(int64_t nch, int p, int P, float taper) {
    if (p >= P) return nch;
    const double r = taper, f = r == 1.0 ? static_cast<double>(p) / P : (1.0 - pow(r, p)) / (1.0 - pow(r, P));
    return llround(nch * f);
}

// The pieces' second stream and events, one set per device, made on first use and kept for the process; the mutex
// keeps two host threads from interleaving records of the same events.
constexpr int MAX_PIECES = 32;
struct PieceStreams {
    cudaStream_t side = nullptr;
    cudaEvent_t fork = nullptr, join = nullptr, ready[MAX_PIECES] = {};
};
static std::mutex g_piece_mutex;
static PieceStreams g_piece_streams[64];

static cudaError_t piece_streams(PieceStreams** out) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    if (dev < 0 || dev >= 64) return cudaErrorInvalidDevice;
    PieceStreams& ps = g_piece_streams[dev];
    if (ps.side == nullptr) {
        int least = 0, greatest = 0;
        if ((e = cudaDeviceGetStreamPriorityRange(&least, &greatest)) != cudaSuccess) return e;
        if ((e = cudaEventCreateWithFlags(&ps.fork, cudaEventDisableTiming)) != cudaSuccess) return e;
        if ((e = cudaEventCreateWithFlags(&ps.join, cudaEventDisableTiming)) != cudaSuccess) return e;
        for (int p = 0; p < MAX_PIECES; ++p) {
            if ((e = cudaEventCreateWithFlags(&ps.ready[p], cudaEventDisableTiming)) != cudaSuccess) return e;
        }
        // the recurrence's stream at the greatest priority: its CTAs go first when intra CTAs leave an SM
        if ((e = cudaStreamCreateWithPriority(&ps.side, cudaStreamNonBlocking, greatest)) != cudaSuccess) return e;
    }
    *out = &ps;
    return cudaSuccess;
}

// pieces > 1: the intra stage over piece p on the caller's stream s, the recurrence over piece p on the second stream
// once it is written, beside the intra stage over piece p + 1; the state between pieces in a.hs, in place (a CTA reads
// and writes its own columns). s waits for the last piece: what follows on s, freeing the workspace included, comes
// after the recurrence (also under CUDA-graph capture: the records and waits become the graph's edges).
static int launch_pieces(const FwdArgs& a, cudaStream_t s, char* err, int errlen) {
    char msg[512];
    std::lock_guard<std::mutex> lock(g_piece_mutex);
    PieceStreams* ps = nullptr;
    cudaError_t e = piece_streams(&ps);
    if (e != cudaSuccess) {
        snprintf(msg, sizeof msg, "kda_fwd: the pieces' stream and events: %s", cudaGetErrorString(e));
        return fail(err, errlen, msg);
    }
    if ((e = cudaEventRecord(ps->fork, s)) != cudaSuccess || (e = cudaStreamWaitEvent(ps->side, ps->fork, 0)) != cudaSuccess) {
        snprintf(msg, sizeof msg, "kda_fwd: fork: %s", cudaGetErrorString(e));
        return fail(err, errlen, msg);
    }
    const int64_t nch = a.NT / a.N;
    for (int p = 0; p < a.pieces; ++p) {
        FwdArgs ap = a;
        ap.chunk_lo = piece_start(nch, p, a.pieces, a.taper);
        ap.chunk_hi = piece_start(nch, p + 1, a.pieces, a.taper);
        ap.h0 = p == 0 ? a.h0 : a.hs;
        ap.ht = p == a.pieces - 1 ? a.ht : a.hs;
        const int64_t blocks = (a.N * (ap.chunk_hi - ap.chunk_lo) + K1_WARPS - 1) / K1_WARPS;
        if (blocks > 0 && launch_intra(ap, blocks, s, msg, sizeof msg) != cudaSuccess) return fail(err, errlen, msg);
        if ((e = cudaEventRecord(ps->ready[p], s)) != cudaSuccess ||
            (e = cudaStreamWaitEvent(ps->side, ps->ready[p], 0)) != cudaSuccess) {
            snprintf(msg, sizeof msg, "kda_fwd: piece %d ready: %s", p, cudaGetErrorString(e));
            return fail(err, errlen, msg);
        }
        if (launch_state(ap, ps->side, msg, sizeof msg) != cudaSuccess) return fail(err, errlen, msg);
    }
    if ((e = cudaEventRecord(ps->join, ps->side)) != cudaSuccess || (e = cudaStreamWaitEvent(s, ps->join, 0)) != cudaSuccess) {
        snprintf(msg, sizeof msg, "kda_fwd: join: %s", cudaGetErrorString(e));
        return fail(err, errlen, msg);
    }
    return 0;
}

extern "C" int kda_fwd_args_size() { return static_cast<int>(sizeof(FwdArgs)); }

extern "C" int kda_fwd(const FwdArgs* args, void* stream, char* err, int errlen) {
    if (args == nullptr) return fail(err, errlen, "kda_fwd: args is null");
    const FwdArgs& a = *args;
    char msg[512];
    if (a.K != D || a.V != D) {
        snprintf(msg, sizeof msg, "kda_fwd: K and V must be %d, got K=%lld V=%lld", D, (long long)a.K, (long long)a.V);
        return fail(err, errlen, msg);
    }
    if (a.N < 1 || a.TT < 0 || a.NT < 0 || a.H < 1 || a.HV < a.H || a.HV % a.H != 0 || a.HV > 65535) {
        snprintf(msg, sizeof msg, "kda_fwd: bad sizes N=%lld TT=%lld NT=%lld H=%lld HV=%lld (need N >= 1, H >= 1, "
                 "HV a multiple of H, HV <= 65535)", (long long)a.N, (long long)a.TT, (long long)a.NT, (long long)a.H,
                 (long long)a.HV);
        return fail(err, errlen, msg);
    }
    if (a.block_v != 32 && a.block_v != 64) {
        snprintf(msg, sizeof msg, "kda_fwd: block_v must be 32 or 64, got %d", a.block_v);
        return fail(err, errlen, msg);
    }
    if (a.gate < 0 || a.gate > 2) return fail(err, errlen, "kda_fwd: gate must be 0, 1 or 2");
    if (a.gate == 1 && a.A_log == nullptr) return fail(err, errlen, "kda_fwd: the softplus gate needs A_log");
    if (a.state_wgmma && a.block_v != 64) return fail(err, errlen, "kda_fwd: the wgmma recurrence takes block_v 64");
    const int64_t blocks1 = (a.NT + K1_WARPS - 1) / K1_WARPS;
    const int64_t blocks2 = a.N * (D / a.block_v) * (a.seq_order != nullptr ? a.HV : 1);
    if (blocks1 > 0x7fffffffLL || blocks2 > 0x7fffffffLL) return fail(err, errlen, "kda_fwd: grid too large");
    if (a.pieces > 1 && (a.pieces > MAX_PIECES || !a.state_wgmma || a.hs == nullptr || a.NT % a.N != 0 ||
                         !(a.taper >= 0.25f && a.taper <= 4.0f))) {
        snprintf(msg, sizeof msg, "kda_fwd: pieces=%d needs pieces <= %d, the wgmma recurrence, the state buffer hs, "
                 "sequences of equal length (NT=%lld, N=%lld) and a taper in [0.25, 4] (got %g)", a.pieces, MAX_PIECES,
                 (long long)a.NT, (long long)a.N, a.taper);
        return fail(err, errlen, msg);
    }
    if (a.TT == 0) return 0;

    const Ptr ptrs[] = {
        {a.q, "q", 16, true}, {a.k, "k", 16, true}, {a.v, "v", 16, true}, {a.g, "g", a.g_fp32 ? 16 : 8, true},
        {a.beta, "beta", 4, true}, {a.A_log, "A_log", 4, false}, {a.dt_bias, "dt_bias", 4, false},
        {a.h0, "initial_state", 4, false}, {a.cu_seqlens, "cu_seqlens", 8, true},
        {a.chunk_indices, "chunk_indices", 8, true}, {a.chunk_offsets, "chunk_offsets", 8, true},
        {a.o, "o", 16, true}, {a.ht, "final_state", 4, false}, {a.qg, "qg", 16, true}, {a.kg, "kg", 16, true},
        {a.w, "w", 16, true}, {a.u, "u", 16, true}, {a.aqk, "aqk", 16, true}, {a.decay, "decay", 16, true},
        {a.hs, "hs", 16, false}, {a.seq_order, "seq_order", 4, false},
    };
    if (check_pointers("kda_fwd", ptrs, sizeof ptrs / sizeof ptrs[0], err, errlen) != 0) return 1;

    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (a.pieces <= 1) {
        if (blocks1 > 0 && launch_intra(a, blocks1, s, msg, sizeof msg) != cudaSuccess) return fail(err, errlen, msg);
        if (launch_state(a, s, msg, sizeof msg) != cudaSuccess) return fail(err, errlen, msg);
        return 0;
    }
    return launch_pieces(a, s, err, errlen);
}

#if defined(__CUDA_ARCH_LIST__) && __CUDA_ARCH_LIST__ == 900
template <int WGS>
static cudaError_t launch_state64(const State64Args& a, int64_t blocks, void* stream) {
    const int smem = k64_smem_bytes<WGS>();
    cudaError_t e = cudaFuncSetAttribute(kda_state64_fwd_kernel<WGS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         smem);
    if (e != cudaSuccess) return e;
    kda_state64_fwd_kernel<WGS><<<dim3(static_cast<unsigned>(blocks / WGS), static_cast<unsigned>(a.HV)), 128 * WGS,
                                   smem, static_cast<cudaStream_t>(stream)>>>(a);
    return cudaGetLastError();
}
#endif

extern "C" int kda_state64_fwd_args_size() { return static_cast<int>(sizeof(State64Args)); }

// the recurrence over 64-token chunks (`kda_state64_fwd_kernel`, sm_90a library only) on the caller's stream
extern "C" int kda_state64_fwd(const State64Args* args, void* stream, char* err, int errlen) {
    if (args == nullptr) return fail(err, errlen, "kda_state64_fwd: args is null");
    const State64Args& a = *args;
    char msg[512];
    if (a.N < 1 || a.TT < 0 || a.NT < 0 || a.HV < 1 || a.HV > 65535) {
        snprintf(msg, sizeof msg, "kda_state64_fwd: bad sizes N=%lld TT=%lld NT=%lld HV=%lld (need N >= 1, "
                 "1 <= HV <= 65535)", (long long)a.N, (long long)a.TT, (long long)a.NT, (long long)a.HV);
        return fail(err, errlen, msg);
    }
    const int64_t blocks = a.N * (D / 64);
    if (blocks > 0x7fffffffLL) return fail(err, errlen, "kda_state64_fwd: grid too large");
    if (a.wgs < 0 || a.wgs > 2) return fail(err, errlen, "kda_state64_fwd: wgs must be 0, 1 or 2");
    if (64 * a.HV * D > 0x7fffffffLL) return fail(err, errlen, "kda_state64_fwd: HV too large for int32 tile offsets");
    if (a.TT == 0) return 0;
    const Ptr ptrs[] = {
        {a.qg, "qg", 16, true}, {a.kg, "kg", 16, true}, {a.w, "w", 16, true}, {a.u, "u", 16, true},
        {a.aqk, "aqk", 16, true}, {a.gl, "gl", 16, true}, {a.h0, "initial_state", 4, false},
        {a.cu_seqlens, "cu_seqlens", 8, true}, {a.chunk_offsets, "chunk_offsets", 8, true}, {a.o, "o", 16, true},
        {a.ht, "final_state", 4, false},
    };
    if (check_pointers("kda_state64_fwd", ptrs, sizeof ptrs / sizeof ptrs[0], err, errlen) != 0) return 1;
#if defined(__CUDA_ARCH_LIST__) && __CUDA_ARCH_LIST__ == 900
    int dev = 0, sms = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const int wgs = a.wgs != 0 ? a.wgs : (e == cudaSuccess && blocks * a.HV > sms ? 2 : 1);
    if (e == cudaSuccess) e = wgs == 2 ? launch_state64<2>(a, blocks, stream) : launch_state64<1>(a, blocks, stream);
    if (e != cudaSuccess) {
        snprintf(msg, sizeof msg, "kda_state64_fwd: launch: %s", cudaGetErrorString(e));
        return fail(err, errlen, msg);
    }
    return 0;
#else
    (void)stream;
    return fail(err, errlen, "kda_state64_fwd: the 64-token recurrence is in the sm_90a library only");
#endif
}

extern "C" int kda_intra64_fwd_args_size() { return static_cast<int>(sizeof(Intra64Args)); }

// the intra stage over 64-token chunks (`kda_intra64_fwd_kernel`) on the caller's stream
extern "C" int kda_intra64_fwd(const Intra64Args* args, void* stream, char* err, int errlen) {
    if (args == nullptr) return fail(err, errlen, "kda_intra64_fwd: args is null");
    const Intra64Args& a = *args;
    char msg[512];
    if (a.K != D || a.V != D) {
        snprintf(msg, sizeof msg, "kda_intra64_fwd: K and V must be %d, got K=%lld V=%lld", D, (long long)a.K,
                 (long long)a.V);
        return fail(err, errlen, msg);
    }
    if (a.TT < 0 || a.NT < 0 || a.NT > 0x7fffffffLL || a.H < 1 || a.HV < a.H || a.HV % a.H != 0 || a.HV > 65535) {
        snprintf(msg, sizeof msg, "kda_intra64_fwd: bad sizes TT=%lld NT=%lld H=%lld HV=%lld (need NT < 2^31, H >= 1, "
                 "HV a multiple of H, HV <= 65535)", (long long)a.TT, (long long)a.NT, (long long)a.H, (long long)a.HV);
        return fail(err, errlen, msg);
    }
    if (a.gate < 0 || a.gate > 2) return fail(err, errlen, "kda_intra64_fwd: gate must be 0, 1 or 2");
    if (a.gate == 1 && a.A_log == nullptr) return fail(err, errlen, "kda_intra64_fwd: the softplus gate needs A_log");
    if (a.TT == 0 || a.NT == 0) return 0;
    const Ptr ptrs[] = {
        {a.q, "q", 16, true}, {a.k, "k", 16, true}, {a.v, "v", 16, true}, {a.g, "g", a.g_fp32 ? 16 : 8, true},
        {a.beta, "beta", 4, true}, {a.A_log, "A_log", 4, false}, {a.dt_bias, "dt_bias", 4, false},
        {a.cu_seqlens, "cu_seqlens", 8, true}, {a.chunk_indices, "chunk_indices", 8, true},
        {a.qg, "qg", 16, true}, {a.kg, "kg", 16, true}, {a.w, "w", 16, true}, {a.u, "u", 16, true},
        {a.aqk, "aqk", 16, true}, {a.gl, "gl", 16, true},
    };
    if (check_pointers("kda_intra64_fwd", ptrs, sizeof ptrs / sizeof ptrs[0], err, errlen) != 0) return 1;
    void (*kernel)(const Intra64Args) = nullptr;
    if (a.gate == 0) kernel = a.g_fp32 ? kda_intra64_fwd_kernel<0, true> : kda_intra64_fwd_kernel<0, false>;
    else if (a.gate == 1) kernel = a.g_fp32 ? kda_intra64_fwd_kernel<1, true> : kda_intra64_fwd_kernel<1, false>;
    else kernel = a.g_fp32 ? kda_intra64_fwd_kernel<2, true> : kda_intra64_fwd_kernel<2, false>;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, I64_SMEM);
    if (e == cudaSuccess) {
        kernel<<<dim3(static_cast<unsigned>(a.NT), static_cast<unsigned>(a.HV)), 128, I64_SMEM,
                 static_cast<cudaStream_t>(stream)>>>(a);
        e = cudaGetLastError();
    }
    if (e != cudaSuccess) {
        snprintf(msg, sizeof msg, "kda_intra64_fwd: launch: %s", cudaGetErrorString(e));
        return fail(err, errlen, msg);
    }
    return 0;
}
