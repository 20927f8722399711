/*
The fused classifier (softmax + cross-entropy + its gradient, in place over the logits; src/fused_classifier.cuh),
its variants validated against an fp64 CPU reference and timed at GPT-2's training shape.

  make dev/cuda/fused_classifier && ./dev/cuda/fused_classifier all [--check] [-n N] [-v V] [--scale S] [--seed S]

Variants (0 is what src ships: the shared-memory kernel where the row fits, else the two-pass kernel):
  1  naive: one block a row, three passes over memory (max, sum of exp, gradient), expf
  2  two passes, the online max and sum, then the gradient from a second read of the row (from L2): src's kernel
     for rows that do not fit shared memory
  3  the row staged in shared memory, read from memory once: src's kernel for Vp * 2 bytes <= 113 KiB

Validation: every variant on fresh randn * scale logits, the padded columns V..Vp holding a large value (a kernel
that read them would see the max there), on the shapes of --check (N = 1, 7, 1000 at GPT-2's V = 50257, and a
vocabulary past the shared-memory kernel's limit, at scales 1 and 8) or the given one. Sampled rows (the first 64,
the last 64 and 384 drawn at random) are compared with the fp64 reference: the loss within 1e-5 relative + 1e-5,
each gradient within 2^-7 relative + dloss * 2^-12 (bf16 keeps 8 bits; the gradient is rounded once), the padded
columns exactly 0. The losses are poisoned (NaN) before each launch, and every loss must be finite.
Timing (without --check): N = B*T = 65536 rows at V = 50257 (Vp = 50304), 20 launches back to back on one buffer
(the gradient written in place is the next launch's input: the same work), bytes = one read + one write of the
logits; GB/s against the GPU's HBM.
*/
#define DEV_CUDA_NO_ATTENTION   // a layer harness: no attention kernels in this binary
#include "dev/cuda/common.h"
#include "src/fused_classifier.cuh"

// variant 1: three passes over the row in memory, one thread per column chunk of 1
__global__ void classifier_naive_kernel(floatX* logits, float* losses, const int* targets, float dloss, int V, int Vp) {
    __shared__ float shared[32];
    floatX* x = logits + (size_t)blockIdx.x * Vp;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < V; c += blockDim.x) m = fmaxf(m, __bfloat162float(x[c]));
    const float row_max = block_reduce_max(m, shared);
    float s = 0.0f;
    for (int c = threadIdx.x; c < V; c += blockDim.x) s += expf(__bfloat162float(x[c]) - row_max);
    const float row_sum = block_reduce_sum(s, shared);
    const int target = targets[blockIdx.x];
    if (threadIdx.x == 0) losses[blockIdx.x] = logf(row_sum) + row_max - __bfloat162float(x[target]);
    __syncthreads();   // the target's logit is read before it is overwritten
    for (int c = threadIdx.x; c < Vp; c += blockDim.x) {
        const float p = c < V ? expf(__bfloat162float(x[c]) - row_max) / row_sum : 0.0f;
        x[c] = __float2bfloat16((p - (c == target ? 1.0f : 0.0f)) * dloss);
    }
}

static const char* kVariantNames[] = {"shipped (src dispatch)", "naive, three passes", "two passes, L2 re-read", "row in shared memory"};
constexpr int kNumVariants = 4;

// false where the variant does not take this shape
bool run_variant(int variant, floatX* logits, float* losses, const int* targets, float dloss, int N, int V, int Vp) {
    switch (variant) {
    case 0: fused_classifier(logits, losses, targets, dloss, N, V, Vp, true, 0); return true;
    case 1: classifier_naive_kernel<<<N, 1024>>>(logits, losses, targets, dloss, V, Vp); break;
    case 2: fused_classifier_kernel<<<N, 1024>>>(logits, losses, targets, dloss, V, Vp, true); break;
    case 3: {
        const size_t smem = (size_t)Vp * sizeof(floatX);
        if (smem > CLASSIFIER_SMEM_MAX_BYTES) return false;
        fused_classifier(logits, losses, targets, dloss, N, V, Vp, true, 0);   // src's dispatch takes this kernel here
        return true;
    }
    }
    cudaCheck(cudaGetLastError());
    return true;
}

struct ClassifierCase { int N, V; float scale; };

// fp64 loss and gradient of one row
void classifier_row_cpu(const floatX* x, int target, double dloss, int V, int Vp, double* loss, std::vector<double>& grad) {
    double m = -INFINITY, s = 0.0;
    for (int c = 0; c < V; c++) m = std::max(m, (double)__bfloat162float(x[c]));
    for (int c = 0; c < V; c++) s += std::exp((double)__bfloat162float(x[c]) - m);
    *loss = std::log(s) + m - (double)__bfloat162float(x[target]);
    grad.assign(Vp, 0.0);
    for (int c = 0; c < V; c++) grad[c] = (std::exp((double)__bfloat162float(x[c]) - m) / s - (c == target ? 1.0 : 0.0)) * dloss;
}

// validates every wanted variant on one case; returns the number of failures
int validate_case(const HarnessArgs& args, const ClassifierCase& cc, std::mt19937_64& rng) {
    const int N = cc.N, V = cc.V, Vp = ceil_div(V, 128) * 128;
    const float dloss = 1.0f / (float)N;
    std::vector<floatX> h_logits((size_t)N * Vp);
    fill_randn_bf16(h_logits, cc.scale, rng);
    for (int r = 0; r < N; r++)
        for (int c = V; c < Vp; c++) h_logits[(size_t)r * Vp + c] = __float2bfloat16(1000.0f);   // padding: must be ignored
    std::vector<int> h_targets(N);
    for (int r = 0; r < N; r++) h_targets[r] = (int)(rng() % V);
    if (N > 1) {   // a row whose target logit dominates (p ~ 1 at the target, gradient ~ 0 there)
        h_targets[1] = V - 1;
        h_logits[(size_t)1 * Vp + V - 1] = __float2bfloat16(60.0f);
    }
    std::vector<int> rows;
    for (int r = 0; r < std::min(N, 64); r++) rows.push_back(r);
    for (int r = std::max(64, N - 64); r < N; r++) rows.push_back(r);
    for (int i = 0; i < 384 && N > 128; i++) rows.push_back(64 + (int)(rng() % (N - 128)));
    std::vector<double> ref_loss(rows.size());
    std::vector<std::vector<double>> ref_grad(rows.size());
    for (size_t i = 0; i < rows.size(); i++)
        classifier_row_cpu(&h_logits[(size_t)rows[i] * Vp], h_targets[rows[i]], dloss, V, Vp, &ref_loss[i], ref_grad[i]);

    floatX* d_logits = device_alloc<floatX>((size_t)N * Vp);
    float* d_losses = device_alloc<float>(N);
    int* d_targets = device_alloc<int>(N);
    to_device(d_targets, h_targets);
    int failures = 0;
    for (int variant = 0; variant < kNumVariants; variant++) {
        if (!args.wants(variant)) continue;
        to_device(d_logits, h_logits);
        poison(d_losses, N * sizeof(float));
        if (!run_variant(variant, d_logits, d_losses, d_targets, dloss, N, V, Vp)) {
            printf("  variant %d (%s): N=%d V=%d does not fit, skipped\n", variant, kVariantNames[variant], N, V);
            continue;
        }
        cudaCheck(cudaDeviceSynchronize());
        std::vector<float> losses = from_device(d_losses, N);
        std::vector<floatX> grads = from_device(d_logits, (size_t)N * Vp);
        int nonfinite = 0;
        for (float l : losses) nonfinite += !std::isfinite(l);
        double loss_err = 0.0, grad_err = 0.0;   // the largest error as a fraction of its tolerance
        for (size_t i = 0; i < rows.size(); i++) {
            const double l = losses[rows[i]];
            loss_err = std::max(loss_err, std::fabs(l - ref_loss[i]) / (1e-5 + 1e-5 * std::fabs(ref_loss[i])));
            for (int c = 0; c < Vp; c++) {
                const double g = __bfloat162float(grads[(size_t)rows[i] * Vp + c]), ref = ref_grad[i][c];
                const double tol = c < V ? std::ldexp(std::fabs(ref), -7) + dloss * std::ldexp(1.0, -12) : 0.0;
                const double err = std::fabs(g - ref);
                if (!(err <= tol)) grad_err = std::max(grad_err, std::isfinite(err) ? 1.0 + err : INFINITY);
                else if (tol > 0) grad_err = std::max(grad_err, err / tol);
            }
        }
        const bool ok = nonfinite == 0 && loss_err <= 1.0 && grad_err <= 1.0;
        printf("  variant %d (%s): N=%d V=%d Vp=%d scale %g: %d non-finite losses, loss err %.2f of tol, grad err %.2f of tol "
               "(%zu rows vs fp64) %s\n", variant, kVariantNames[variant], N, V, Vp, cc.scale, nonfinite, loss_err, grad_err,
               rows.size(), ok ? "ok" : "FAIL");
        failures += !ok;
    }
    cudaCheck(cudaFree(d_logits)); cudaCheck(cudaFree(d_losses)); cudaCheck(cudaFree(d_targets));
    return failures;
}

void bench(const HarnessArgs& args, int N, int V, std::mt19937_64& rng) {
    const int Vp = ceil_div(V, 128) * 128;
    std::vector<floatX> h_logits((size_t)N * Vp);
    fill_randn_bf16(h_logits, 2.0f, rng);
    std::vector<int> h_targets(N);
    for (int r = 0; r < N; r++) h_targets[r] = (int)(rng() % V);
    floatX* d_logits = device_alloc<floatX>((size_t)N * Vp);
    float* d_losses = device_alloc<float>(N);
    int* d_targets = device_alloc<int>(N);
    to_device(d_targets, h_targets);
    const double bytes = 2.0 * N * Vp * sizeof(floatX);
    // HBM bandwidth by name (the runtime no longer reports the memory clock): H200 4.8 TB/s, H100 SXM 3.35 TB/s
    const std::string name = device_props().name;
    const double peak_gbps = name.find("H200") != std::string::npos ? 4800.0 : name.find("H100") != std::string::npos ? 3350.0 : 0.0;
    printf("timing N=%d V=%d Vp=%d (%.2f GB a launch; HBM %.0f GB/s)\n", N, V, Vp, bytes / 1e9, peak_gbps);
    double base_ms = 0.0;
    for (int variant = 0; variant < kNumVariants; variant++) {
        if (!args.wants(variant)) continue;
        to_device(d_logits, h_logits);
        const Timing t = time_kernel([&](int) { run_variant(variant, d_logits, d_losses, d_targets, 1.0f / N, N, V, Vp); }, 20, 0);
        if (variant == 1) base_ms = t.median_ms;
        const double gbps = bytes / (t.median_ms * 1e-3) / 1e9;
        printf("variant %d (%s): %.4f ms (min %.4f) %.0f GB/s", variant, kVariantNames[variant], t.median_ms, t.min_ms, gbps);
        if (peak_gbps > 0) printf(" (%.0f%% of HBM)", 100.0 * gbps / peak_gbps);
        if (base_ms > 0 && variant > 1) printf(", %.2fx naive", base_ms / t.median_ms);
        printf("\n");
        printf("RESULT classifier variant=%d N=%d V=%d ms_med=%.4f ms_min=%.4f gbps=%.0f\n", variant, N, V, t.median_ms, t.min_ms, gbps);
    }
    cudaCheck(cudaFree(d_logits)); cudaCheck(cudaFree(d_losses)); cudaCheck(cudaFree(d_targets));
}

int main(int argc, char** argv) {
    int N = 65536, V = 50257;
    const HarnessArgs args = parse_layer_harness_args(argc, argv, {{"-n", &N}, {"-v", &V}});
    std::mt19937_64 rng(args.seed);
    std::vector<ClassifierCase> cases;
    if (args.check) {
        for (float scale : {1.0f, 8.0f})
            for (ClassifierCase cc : {ClassifierCase{1, 50257, 0}, {7, 50257, 0}, {1000, 50257, 0}, {300, 60000, 0}}) {
                cc.scale = scale;
                cases.push_back(cc);
            }
    } else {
        cases.push_back({std::min(N, 1000), V, args.scale});
    }
    int failures = 0;
    for (const ClassifierCase& cc : cases) failures += validate_case(args, cc, rng);
    if (args.bench && failures == 0) bench(args, N, V, rng);
    printf("%s\n", failures ? "FAILED" : "all ok");
    return failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
