/*
LayerNorm forward and backward (src/layernorm.cuh): the variants validated against an fp64 CPU reference and timed
at GPT-2's training shape.

  make dev/cuda/layernorm && ./dev/cuda/layernorm all [--check] [-n N] [-c C] [--seed S]

Variants, forward and backward alike (0 is what src ships: variant 2's forward and variant 4's backward, as training
runs it, with the column sums of dinp, the bias gradient of the projection before the layernorm):
  1  naive: forward one thread a row; backward one thread a row for dinp, then one thread a channel for dw, db
  2  a warp a row that re-reads the row for each pass; the backward sums dw, db in shared memory row by row
     (src's forward; the backward src ran before variant 4's)
  3  a warp a row that reads the row once into registers and keeps its channels' dw, db sums there (C <= 1024;
     the same additions in the same order as variant 2, so bit-identical to it)
  4  the backward of variant 2 with the row read once, all of a lane's chunks in flight together, and held in
     registers as packed bf16 for the second pass; above C = 1024 two warps share a row, each with half the channels
     and half the shared memory (src's backward; forward as variant 2; bit-identical to 2 up to C = 1024, where
     warps do not share rows)

Validation (--check: N = 4096 at C = 768, 1024, 1032, 1600, 2304 and N = 1, 7 at C = 768, 1600; otherwise the given
shape; 1032 splits unevenly over two warps, 2304 in segments) on fresh randn inputs (mean 0.5, so the mean matters),
the outputs poisoned (NaN) before each launch: out, mean, rstd and dinp (+= onto a random dinp), dw and db (+= onto
random values) against fp64, and variant 0's dsum (+= onto random values) against the fp64 sum of the dinp it wrote.
bf16 outputs within 2^-7 relative + 2^-7 * the row's (column's) scale, fp32 mean and rstd within 1e-5 relative.
Variants 3 and 4 must equal variant 2 bit for bit (4 up to C = 1024). Timing (without --check): N = 65536, C = 768,
median of 30 launches; bytes: forward one read of inp and one write of out; backward reads of dout, inp, dinp and a
write of dinp (the fp32 statistics and partials left out).
*/
#define DEV_CUDA_NO_ATTENTION   // a layer harness: no attention kernels in this binary
#include "dev/cuda/common.h"
#include "src/layernorm.cuh"
#include "src/utils.h"   // strfmt

// ----------------------------------------------------------------------------
// variant 1: naive

__global__ void layernorm_forward_naive_kernel(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight,
                                               const floatX* bias, int N, int C) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const floatX* x = inp + (size_t)row * C;
    float m = 0.0f, v = 0.0f;
    for (int c = 0; c < C; c++) m += __bfloat162float(x[c]);
    m /= C;
    for (int c = 0; c < C; c++) { float d = __bfloat162float(x[c]) - m; v += d * d; }
    float s = rsqrtf(v / C + LN_EPS);
    for (int c = 0; c < C; c++)
        out[(size_t)row * C + c] = __float2bfloat16((__bfloat162float(x[c]) - m) * s * __bfloat162float(weight[c]) + __bfloat162float(bias[c]));
    mean[row] = m;
    rstd[row] = s;
}

__global__ void layernorm_backward_naive_dinp_kernel(floatX* dinp, const floatX* dout, const floatX* inp, const floatX* weight,
                                                     const float* mean, const float* rstd, int N, int C) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    size_t off = (size_t)row * C;
    float m = mean[row], s = rstd[row], dnorm_mean = 0.0f, dnorm_xhat_mean = 0.0f;
    for (int c = 0; c < C; c++) {
        float xhat = (__bfloat162float(inp[off + c]) - m) * s, dnorm = __bfloat162float(dout[off + c]) * __bfloat162float(weight[c]);
        dnorm_mean += dnorm;
        dnorm_xhat_mean += dnorm * xhat;
    }
    dnorm_mean /= C;
    dnorm_xhat_mean /= C;
    for (int c = 0; c < C; c++) {
        float xhat = (__bfloat162float(inp[off + c]) - m) * s, dnorm = __bfloat162float(dout[off + c]) * __bfloat162float(weight[c]);
        dinp[off + c] = __float2bfloat16(__bfloat162float(dinp[off + c]) + (dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * s);
    }
}

__global__ void layernorm_backward_naive_dwdb_kernel(floatX* dweight, floatX* dbias, const floatX* dout, const floatX* inp,
                                                     const float* mean, const float* rstd, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float dw = 0.0f, db = 0.0f;
    for (int row = 0; row < N; row++) {
        float d = __bfloat162float(dout[(size_t)row * C + c]);
        dw += d * (__bfloat162float(inp[(size_t)row * C + c]) - mean[row]) * rstd[row];
        db += d;
    }
    dweight[c] = __float2bfloat16(__bfloat162float(dweight[c]) + dw);
    dbias[c] = __float2bfloat16(__bfloat162float(dbias[c]) + db);
}

// ----------------------------------------------------------------------------
// variant 2's backward (src's before the row moved into registers): a warp a row, dw/db in shared memory as src's
// kernel keeps them, the row read from global memory chunk by chunk in the first pass and again (from L1) in the
// second. Its loop holds one chunk's loads in flight at a time, so the warps that the shared memory lets an SM
// hold keep too few bytes in flight at C = 1024 and above.
__global__ void layernorm_backward_reread_kernel(floatX* dinp, float* partials, const floatX* dout, const floatX* inp,
                                                 const floatX* weight, const float* mean, const float* rstd, int N, int C) {
    extern __shared__ float ln_bwd_smem[];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float* dw_acc = ln_bwd_smem + (size_t)warp * 2 * C;
    float* db_acc = dw_acc + C;
    const int slot_stride = C / X128_SIZE;
    for (int c = lane; c < 2 * C; c += 32) dw_acc[c] = 0.0f;
    __syncwarp();
    for (int row = blockIdx.x * LN_BWD_WARPS + warp; row < N; row += gridDim.x * LN_BWD_WARPS) {
        size_t off = (size_t)row * C;
        float m = mean[row], s = rstd[row];
        float dnorm_sum = 0.0f, dnorm_xhat_sum = 0.0f;
        for (int c = lane * X128_SIZE; c < C; c += 32 * X128_SIZE) {
            x128 d = load128(dout + off + c), x = load128(inp + off + c), w = load128(weight + c);
            for (int k = 0; k < X128_SIZE; k++) {
                float xhat = (x.f(k) - m) * s;
                float dnorm = d.f(k) * w.f(k);
                dnorm_sum += dnorm;
                dnorm_xhat_sum += dnorm * xhat;
                dw_acc[k * slot_stride + c / X128_SIZE] += d.f(k) * xhat;
                db_acc[k * slot_stride + c / X128_SIZE] += d.f(k);
            }
        }
        float dnorm_mean = warp_reduce_sum(dnorm_sum) / C;
        float dnorm_xhat_mean = warp_reduce_sum(dnorm_xhat_sum) / C;
        for (int c = lane * X128_SIZE; c < C; c += 32 * X128_SIZE) {
            x128 d = load128cs(dout + off + c), x = load128cs(inp + off + c), w = load128(weight + c);
            x128 di = load128(dinp + off + c);
            for (int k = 0; k < X128_SIZE; k++) {
                float xhat = (x.f(k) - m) * s;
                float dnorm = d.f(k) * w.f(k);
                di.set(k, di.f(k) + (dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * s);
            }
            store128(dinp + off + c, di);
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) {
        const int slot = (c / C) * C + ln_bwd_slot(c % C, C);
        float sum = 0.0f;
        for (int w = 0; w < LN_BWD_WARPS; w++) sum += ln_bwd_smem[(size_t)w * 2 * C + slot];
        partials[(size_t)blockIdx.x * 2 * C + c] = sum;
    }
}

// ----------------------------------------------------------------------------
// variant 3: the row (forward) and a lane's channels' dw, db sums (backward) in registers, for C <= 1024. The same
// additions in the same order as variant 2's kernels, so bit-identical to them. Slower on an H100 (dev/cuda/RESULTS.md): the backward's sums take registers, and the warps an SM then holds lose more than the shared-memory
// adds cost.

// forward: the row read once into registers: lane l holds channels l*8 + 256k .. for k < kChunks
template <int kChunks>
__global__ void layernorm_forward_registers_kernel(floatX* out, float* mean, float* rstd, const floatX* inp,
                                                   const floatX* weight, const floatX* bias, int N, int C) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const floatX* x = inp + (size_t)row * C;
    x128 v[kChunks];
    float sum = 0.0f;
    #pragma unroll
    for (int k = 0; k < kChunks; k++) {
        const int c = lane * X128_SIZE + k * 32 * X128_SIZE;
        if (c < C) {
            v[k] = load128cs(x + c);
            for (int e = 0; e < X128_SIZE; e++) sum += v[k].f(e);
        }
    }
    float m = warp_reduce_sum(sum) / C;
    float var = 0.0f;
    #pragma unroll
    for (int k = 0; k < kChunks; k++) {
        const int c = lane * X128_SIZE + k * 32 * X128_SIZE;
        if (c < C) for (int e = 0; e < X128_SIZE; e++) { float d = v[k].f(e) - m; var += d * d; }
    }
    float s = rsqrtf(warp_reduce_sum(var) / C + LN_EPS);
    floatX* o = out + (size_t)row * C;
    #pragma unroll
    for (int k = 0; k < kChunks; k++) {
        const int c = lane * X128_SIZE + k * 32 * X128_SIZE;
        if (c < C) {
            x128 w = load128(weight + c), b = load128(bias + c), r;
            for (int e = 0; e < X128_SIZE; e++) r.set(e, (v[k].f(e) - m) * s * w.f(e) + b.f(e));
            store128(o + c, r);
        }
    }
    if (lane == 0 && mean) mean[row] = m;
    if (lane == 0 && rstd) rstd[row] = s;
}

// 16-byte chunks a lane holds for rows of C channels (C / 256 rounded up), or 0 where the register kernels do not apply
inline int layernorm_register_chunks(int C) { return C % X128_SIZE == 0 && C <= 4 * 32 * X128_SIZE ? ceil_div(C, 32 * X128_SIZE) : 0; }

// backward: the sums in registers: lane l owns channels l*8 + 256k .. (k < kChunks) and keeps their dw, db sums
// over its rows there; the warps' sums meet in shared memory once, at the end. The second pass re-reads the row
// (from L1), as the other kernel does: keeping it in registers too would halve the warps an SM holds.
template <int kChunks>
__global__ void layernorm_backward_registers_kernel(floatX* dinp, float* partials, const floatX* dout, const floatX* inp,
                                                    const floatX* weight, const float* mean, const float* rstd, int N, int C) {
    extern __shared__ float ln_bwd_smem[];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float dw[kChunks][X128_SIZE] = {}, db[kChunks][X128_SIZE] = {};
    x128 w[kChunks];
    #pragma unroll
    for (int k = 0; k < kChunks; k++) {
        const int c = lane * X128_SIZE + k * 32 * X128_SIZE;
        if (c < C) w[k] = load128(weight + c);
    }
    for (int row = blockIdx.x * LN_BWD_WARPS + warp; row < N; row += gridDim.x * LN_BWD_WARPS) {
        size_t off = (size_t)row * C;
        float m = mean[row], s = rstd[row];
        float dnorm_sum = 0.0f, dnorm_xhat_sum = 0.0f;
        #pragma unroll
        for (int k = 0; k < kChunks; k++) {
            const int c = lane * X128_SIZE + k * 32 * X128_SIZE;
            if (c >= C) continue;
            const x128 d = load128(dout + off + c), x = load128(inp + off + c);
            for (int e = 0; e < X128_SIZE; e++) {
                float xhat = (x.f(e) - m) * s;
                float dnorm = d.f(e) * w[k].f(e);
                dnorm_sum += dnorm;
                dnorm_xhat_sum += dnorm * xhat;
                dw[k][e] += d.f(e) * xhat;
                db[k][e] += d.f(e);
            }
        }
        float dnorm_mean = warp_reduce_sum(dnorm_sum) / C;
        float dnorm_xhat_mean = warp_reduce_sum(dnorm_xhat_sum) / C;
        #pragma unroll
        for (int k = 0; k < kChunks; k++) {
            const int c = lane * X128_SIZE + k * 32 * X128_SIZE;
            if (c >= C) continue;
            const x128 d = load128cs(dout + off + c), x = load128cs(inp + off + c);
            x128 di = load128(dinp + off + c);
            for (int e = 0; e < X128_SIZE; e++) {
                float xhat = (x.f(e) - m) * s;
                float dnorm = d.f(e) * w[k].f(e);
                di.set(e, di.f(e) + (dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * s);
            }
            store128(dinp + off + c, di);
        }
    }
    // each warp's sums into its slice ((LN_BWD_WARPS, 2, C) floats), then the block adds the slices in order
    float* dw_slice = ln_bwd_smem + (size_t)warp * 2 * C;
    #pragma unroll
    for (int k = 0; k < kChunks; k++) {
        const int c = lane * X128_SIZE + k * 32 * X128_SIZE;
        if (c >= C) continue;
        for (int e = 0; e < X128_SIZE; e++) { dw_slice[c + e] = dw[k][e]; dw_slice[C + c + e] = db[k][e]; }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) {
        float sum = 0.0f;
        for (int w = 0; w < LN_BWD_WARPS; w++) sum += ln_bwd_smem[(size_t)w * 2 * C + c];
        partials[(size_t)blockIdx.x * 2 * C + c] = sum;
    }
}

// ----------------------------------------------------------------------------

struct LnBuffers {
    floatX *inp, *weight, *bias, *out, *dout, *dinp, *dweight, *dbias, *dsum;
    float *mean, *rstd, *scratch;
};

LnBuffers alloc_ln_buffers(int N, int C) {
    LnBuffers b;
    b.inp = device_alloc<floatX>((size_t)N * C); b.weight = device_alloc<floatX>(C); b.bias = device_alloc<floatX>(C);
    b.out = device_alloc<floatX>((size_t)N * C); b.dout = device_alloc<floatX>((size_t)N * C); b.dinp = device_alloc<floatX>((size_t)N * C);
    b.dweight = device_alloc<floatX>(C); b.dbias = device_alloc<floatX>(C); b.dsum = device_alloc<floatX>(C);
    b.mean = device_alloc<float>(N); b.rstd = device_alloc<float>(N);
    b.scratch = device_alloc<float>(layernorm_backward_scratch_floats(N, C));
    return b;
}
void free_ln_buffers(LnBuffers& b) {
    for (void* p : {(void*)b.inp, (void*)b.weight, (void*)b.bias, (void*)b.out, (void*)b.dout, (void*)b.dinp, (void*)b.dweight,
                    (void*)b.dbias, (void*)b.dsum, (void*)b.mean, (void*)b.rstd, (void*)b.scratch})
        cudaCheck(cudaFree(p));
}

static const char* kVariantNames[] = {"shipped (src dispatch)", "naive", "re-read rows, dw/db in shared memory", "row and dw/db in registers",
                                      "row in registers, dw/db in shared memory"};
constexpr int kNumVariants = 5;

// each variant's kernels; false where variant 3 does not take C
bool launch_forward(int variant, const LnBuffers& b, int N, int C) {
    const int grid = ceil_div(N, 8);
    if (variant == 0) layernorm_forward(b.out, b.mean, b.rstd, b.inp, b.weight, b.bias, N, C, 0);
    else if (variant == 1) layernorm_forward_naive_kernel<<<ceil_div(N, 128), 128>>>(b.out, b.mean, b.rstd, b.inp, b.weight, b.bias, N, C);
    else if (variant == 2 || variant == 4) layernorm_forward_kernel<<<grid, 256>>>(b.out, b.mean, b.rstd, b.inp, b.weight, b.bias, N, C);
    else switch (layernorm_register_chunks(C)) {
        case 1: layernorm_forward_registers_kernel<1><<<grid, 256>>>(b.out, b.mean, b.rstd, b.inp, b.weight, b.bias, N, C); break;
        case 2: layernorm_forward_registers_kernel<2><<<grid, 256>>>(b.out, b.mean, b.rstd, b.inp, b.weight, b.bias, N, C); break;
        case 3: layernorm_forward_registers_kernel<3><<<grid, 256>>>(b.out, b.mean, b.rstd, b.inp, b.weight, b.bias, N, C); break;
        case 4: layernorm_forward_registers_kernel<4><<<grid, 256>>>(b.out, b.mean, b.rstd, b.inp, b.weight, b.bias, N, C); break;
        default: return false;
    }
    cudaCheck(cudaGetLastError());
    return true;
}

bool launch_backward(int variant, const LnBuffers& b, int N, int C) {
    // variants 2 and 3: a warp a row, each warp's dw, db over all C channels
    const int blocks = layernorm_backward_num_blocks(N, C, 2), threads = LN_BWD_WARPS * 32;
    const size_t smem = (size_t)LN_BWD_WARPS * 2 * C * sizeof(float);
    if (variant == 0 || variant == 4) {   // src runs variant 4's kernel (and opts in to its shared memory)
        layernorm_backward(b.dinp, b.dweight, b.dbias, b.scratch, b.dout, b.inp, b.weight, b.mean, b.rstd, N, C, 0,
                           variant == 0 ? b.dsum : nullptr);
        return true;
    }
    if (variant == 2) {
        static size_t opted_in = 0;   // above 48 KiB of shared memory a kernel must opt in
        if (smem > opted_in) {
            cudaCheck(cudaFuncSetAttribute(layernorm_backward_reread_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            opted_in = smem;
        }
        layernorm_backward_reread_kernel<<<blocks, threads, smem>>>(b.dinp, b.scratch, b.dout, b.inp, b.weight, b.mean, b.rstd, N, C);
        cudaCheck(cudaGetLastError());
        reduce_partials_add(b.dweight, b.dbias, b.scratch, blocks, C, 0);
        return true;
    }
    if (variant == 1) {
        layernorm_backward_naive_dinp_kernel<<<ceil_div(N, 128), 128>>>(b.dinp, b.dout, b.inp, b.weight, b.mean, b.rstd, N, C);
        layernorm_backward_naive_dwdb_kernel<<<ceil_div(C, 128), 128>>>(b.dweight, b.dbias, b.dout, b.inp, b.mean, b.rstd, N, C);
        cudaCheck(cudaGetLastError());
        return true;
    }
    switch (layernorm_register_chunks(C)) {   // variant 3
        case 1: layernorm_backward_registers_kernel<1><<<blocks, threads, smem>>>(b.dinp, b.scratch, b.dout, b.inp, b.weight, b.mean, b.rstd, N, C); break;
        case 2: layernorm_backward_registers_kernel<2><<<blocks, threads, smem>>>(b.dinp, b.scratch, b.dout, b.inp, b.weight, b.mean, b.rstd, N, C); break;
        case 3: layernorm_backward_registers_kernel<3><<<blocks, threads, smem>>>(b.dinp, b.scratch, b.dout, b.inp, b.weight, b.mean, b.rstd, N, C); break;
        case 4: layernorm_backward_registers_kernel<4><<<blocks, threads, smem>>>(b.dinp, b.scratch, b.dout, b.inp, b.weight, b.mean, b.rstd, N, C); break;
        default: return false;
    }
    cudaCheck(cudaGetLastError());
    reduce_partials_add(b.dweight, b.dbias, b.scratch, blocks, C, 0);
    return true;
}

// |got - ref| <= 2^-7 (|ref| + scale) for every element; returns the worst error as a fraction of that
double bf16_check(const std::vector<floatX>& got, const std::vector<double>& ref, const std::vector<double>& scale, size_t inner,
                  size_t* bad) {
    double worst = 0.0;
    for (size_t i = 0; i < ref.size(); i++) {
        const double g = __bfloat162float(got[i]), tol = std::ldexp(std::fabs(ref[i]) + scale[i / inner], -7);
        const double frac = std::isfinite(g) ? std::fabs(g - ref[i]) / tol : INFINITY;
        worst = std::max(worst, frac);
        *bad += !(frac <= 1.0);
    }
    return worst;
}

int validate(const HarnessArgs& args, int N, int C, std::mt19937_64& rng) {
    std::vector<floatX> h_inp((size_t)N * C), h_w(C), h_b(C), h_dout((size_t)N * C), h_dinp((size_t)N * C), h_dw(C), h_db(C), h_ds(C);
    fill_randn_bf16(h_inp, 1.0f, rng);
    for (floatX& x : h_inp) x = __float2bfloat16(__bfloat162float(x) + 0.5f);
    fill_randn_bf16(h_w, 1.0f, rng); fill_randn_bf16(h_b, 1.0f, rng); fill_randn_bf16(h_dout, 1.0f, rng);
    fill_randn_bf16(h_dinp, 1.0f, rng); fill_randn_bf16(h_dw, 1.0f, rng); fill_randn_bf16(h_db, 1.0f, rng);
    fill_randn_bf16(h_ds, 1.0f, rng);
    // fp64 reference; the backward takes the fp32 mean/rstd the forward under test wrote, as training does
    std::vector<double> ref_out((size_t)N * C), ref_mean(N), ref_rstd(N), ones(std::max(N, C), 1.0);
    for (int r = 0; r < N; r++) {
        double m = 0.0, v = 0.0;
        for (int c = 0; c < C; c++) m += __bfloat162float(h_inp[(size_t)r * C + c]);
        m /= C;
        for (int c = 0; c < C; c++) { double d = __bfloat162float(h_inp[(size_t)r * C + c]) - m; v += d * d; }
        const double s = 1.0 / std::sqrt(v / C + LN_EPS);
        ref_mean[r] = m; ref_rstd[r] = s;
        for (int c = 0; c < C; c++)
            ref_out[(size_t)r * C + c] = (__bfloat162float(h_inp[(size_t)r * C + c]) - m) * s * __bfloat162float(h_w[c]) + __bfloat162float(h_b[c]);
    }
    std::vector<double> ref_dinp((size_t)N * C), ref_dw(C), ref_db(C), row_scale(N), col_scale(C);
    for (int c = 0; c < C; c++) { ref_dw[c] = __bfloat162float(h_dw[c]); ref_db[c] = __bfloat162float(h_db[c]); }
    for (int r = 0; r < N; r++) {
        const double m = ref_mean[r], s = ref_rstd[r];
        double dm = 0.0, dxm = 0.0, scale = 0.0;
        for (int c = 0; c < C; c++) {
            const double d = __bfloat162float(h_dout[(size_t)r * C + c]), xhat = (__bfloat162float(h_inp[(size_t)r * C + c]) - m) * s;
            dm += d * __bfloat162float(h_w[c]);
            dxm += d * __bfloat162float(h_w[c]) * xhat;
            ref_dw[c] += d * xhat;
            ref_db[c] += d;
            col_scale[c] += std::fabs(d);
        }
        dm /= C; dxm /= C;
        for (int c = 0; c < C; c++) {
            const double d = __bfloat162float(h_dout[(size_t)r * C + c]), xhat = (__bfloat162float(h_inp[(size_t)r * C + c]) - m) * s;
            const double g = (d * __bfloat162float(h_w[c]) - dm - xhat * dxm) * s;
            ref_dinp[(size_t)r * C + c] = __bfloat162float(h_dinp[(size_t)r * C + c]) + g;
            scale = std::max(scale, std::fabs(g));
        }
        row_scale[r] = scale + 1.0;   // the initial dinp is randn: its rounding is on the scale of 1
    }
    for (int c = 0; c < C; c++) col_scale[c] = col_scale[c] * 4.0 / std::sqrt((double)N) + 1.0;   // sum of N terms: ~sqrt(N) rounding noise

    LnBuffers b = alloc_ln_buffers(N, C);
    to_device(b.inp, h_inp); to_device(b.weight, h_w); to_device(b.bias, h_b); to_device(b.dout, h_dout);
    int failures = 0;
    std::vector<floatX> fwd_v2, dinp_v2, dw_v2;   // variant 2's outputs, which variants 3 and 4 must match bit for bit
    for (int variant : {2, 0, 1, 3, 4}) {
        if (!args.wants(variant) && variant != 2) continue;
        poison(b.out, (size_t)N * C * 2); poison(b.mean, N * 4); poison(b.rstd, N * 4);
        if (!launch_forward(variant, b, N, C)) { printf("  variant %d: C=%d not taken, skipped\n", variant, C); continue; }
        cudaCheck(cudaDeviceSynchronize());
        std::vector<floatX> out = from_device(b.out, (size_t)N * C);
        std::vector<float> mean = from_device(b.mean, N), rstd = from_device(b.rstd, N);
        size_t bad = 0;
        const double out_err = bf16_check(out, ref_out, ones, C, &bad);
        double stat_err = 0.0;
        for (int r = 0; r < N; r++) {
            stat_err = std::max(stat_err, std::fabs(mean[r] - ref_mean[r]) / (1e-5 * (std::fabs(ref_mean[r]) + 1.0)));
            stat_err = std::max(stat_err, std::fabs(rstd[r] - ref_rstd[r]) / (1e-5 * ref_rstd[r]));
        }
        if (!(stat_err <= 1.0)) bad++;
        // backward from this variant's statistics
        to_device(b.dinp, h_dinp); to_device(b.dweight, h_dw); to_device(b.dbias, h_db); to_device(b.dsum, h_ds);
        poison(b.scratch, layernorm_backward_scratch_floats(N, C) * 4);
        launch_backward(variant, b, N, C);
        cudaCheck(cudaDeviceSynchronize());
        std::vector<floatX> dinp = from_device(b.dinp, (size_t)N * C), dw = from_device(b.dweight, C), db = from_device(b.dbias, C);
        const double dinp_err = bf16_check(dinp, ref_dinp, row_scale, C, &bad);
        const double dw_err = bf16_check(dw, ref_dw, col_scale, 1, &bad), db_err = bf16_check(db, ref_db, col_scale, 1, &bad);
        std::string dsum_note;
        if (variant == 0) {   // dsum: the column sums of the dinp it wrote, in fp64, onto the random start
            std::vector<double> ref_ds(C), ds_scale(C);
            for (int c = 0; c < C; c++) ref_ds[c] = __bfloat162float(h_ds[c]);
            for (int r = 0; r < N; r++)
                for (int c = 0; c < C; c++) {
                    const double v = __bfloat162float(dinp[(size_t)r * C + c]);
                    ref_ds[c] += v;
                    ds_scale[c] += std::fabs(v);
                }
            for (int c = 0; c < C; c++) ds_scale[c] = ds_scale[c] * 4.0 / std::sqrt((double)N) + 1.0;
            const double ds_err = bf16_check(from_device(b.dsum, C), ref_ds, ds_scale, 1, &bad);
            dsum_note = strfmt(", dsum %.2f", ds_err);
        }
        dw.insert(dw.end(), db.begin(), db.end());
        std::string same;
        if (variant == 2) { fwd_v2 = out; dinp_v2 = dinp; dw_v2 = dw; }
        else if (variant == 3 || (variant == 4 && ln_bwd_split(C) == 1)) {
            const bool identical = memcmp(out.data(), fwd_v2.data(), out.size() * 2) == 0;
            const bool identical_b = memcmp(dinp.data(), dinp_v2.data(), dinp.size() * 2) == 0 && memcmp(dw.data(), dw_v2.data(), dw.size() * 2) == 0;
            same = strfmt(", bit-identical to variant 2: forward %s, backward %s", identical ? "yes" : "NO", identical_b ? "yes" : "NO");
            if (!identical || !identical_b) bad++;
        }
        const bool ok = bad == 0;
        if (args.wants(variant))
            printf("  variant %d (%s) N=%d C=%d: out %.2f, mean/rstd %.2f, dinp %.2f, dw %.2f, db %.2f%s of tol%s %s\n", variant,
                   kVariantNames[variant], N, C, out_err, stat_err, dinp_err, dw_err, db_err, dsum_note.c_str(), same.c_str(), ok ? "ok" : "FAIL");
        failures += !ok && args.wants(variant);
    }
    free_ln_buffers(b);
    return failures;
}

void bench(const HarnessArgs& args, int N, int C, std::mt19937_64& rng) {
    LnBuffers b = alloc_ln_buffers(N, C);
    std::vector<floatX> h((size_t)N * C);
    fill_randn_bf16(h, 1.0f, rng);
    for (floatX* p : {b.inp, b.dout, b.dinp}) to_device(p, h);
    std::vector<floatX> hw(h.begin(), h.begin() + C);
    for (floatX* p : {b.weight, b.bias, b.dweight, b.dbias}) to_device(p, hw);
    const double fwd_bytes = 2.0 * N * C * 2, bwd_bytes = 4.0 * N * C * 2;
    printf("timing N=%d C=%d (forward %.0f MB, backward %.0f MB a launch)\n", N, C, fwd_bytes / 1e6, bwd_bytes / 1e6);
    for (int variant = 0; variant < kNumVariants; variant++) {
        if (!args.wants(variant)) continue;
        if (!launch_forward(variant, b, N, C)) continue;
        const Timing f = time_kernel([&](int) { launch_forward(variant, b, N, C); }, args.repeats, 0);
        const Timing g = time_kernel([&](int) { launch_backward(variant, b, N, C); }, variant == 1 ? 3 : args.repeats, 0, 1);
        printf("variant %d (%s): forward %.4f ms %.0f GB/s | backward %.4f ms %.0f GB/s\n", variant, kVariantNames[variant],
               f.median_ms, fwd_bytes / f.median_ms / 1e6, g.median_ms, bwd_bytes / g.median_ms / 1e6);
        printf("RESULT layernorm variant=%d N=%d C=%d fwd_ms_med=%.4f bwd_ms_med=%.4f\n", variant, N, C, f.median_ms, g.median_ms);
    }
    free_ln_buffers(b);
}

int main(int argc, char** argv) {
    int N = 65536, C = 768;
    const HarnessArgs args = parse_layer_harness_args(argc, argv, {{"-n", &N}, {"-c", &C}});
    std::mt19937_64 rng(args.seed);
    int failures = 0;
    if (args.check) {
        for (int c : {768, 1024, 1032, 1600, 2304}) failures += validate(args, 4096, c, rng);
        for (int c : {768, 1600})
            for (int n : {1, 7}) failures += validate(args, n, c, rng);
    } else {
        failures += validate(args, std::min(N, 4096), C, rng);
    }
    if (args.bench && failures == 0) bench(args, N, C, rng);
    printf("%s\n", failures ? "FAILED" : "all ok");
    return failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
