/*
Causal attention forward: every variant validated (out AND lse) against the GPU fp32 reference
(itself checked against the CPU fp64 reference), then timed.

  make dev/cuda/attention_forward && ./dev/cuda/attention_forward 3          (variant 3, default shape)
  ./dev/cuda/attention_forward all --check                                   (every variant and config, validation set)
  ./dev/cuda/attention_forward all --check --first-config                    (each variant's first config, as make test)
  ./dev/cuda/attention_forward all --shapes bench                            (the benchmark shapes)
  ./dev/cuda/attention_forward 0 -b 64 -t 1024 -n 12 -d 64 --scale 8

Variants (one file each in forward_variants/; measured figures in dev/cuda/RESULTS.md):
  0  what src/attention.cuh ships: variant 5's kernel on Hopper, variant 3's elsewhere
  1  naive: one warp per query row, fp32 (the GPU reference, writing bf16)
  2  materialized: permute, cuBLAS q k^T, causal softmax, cuBLAS att v, unpermute (llm.c without cuDNN; the baseline)
  3  FlashAttention-2 on mma.sync: cp.async double buffer, swizzled smem, Q in registers; tile sweep (the portable path)
  4  Hopper wgmma (sm_90a): variant 3's loop with warpgroup MMAs straight from shared memory; "/ovl" configs overlap
     P V with the next softmax (FA3)
  5  Hopper, warp-specialised: TMA producer warpgroup, 2-3 consumer warpgroups (setmaxnreg), mbarrier ring,
     ping-pong, persistent; "/c2" CTA pairs share K/V by TMA multicast (what src ships on sm_90a)
FLOPs: 4*B*NH*T*T*HS/2 (causal).

qkv is (B, T, 3, NH, HS) bf16; out (B, T, NH, HS) bf16; lse (B, NH, T) fp32.
*/
#include "dev/cuda/common.h"
#include "src/attention_forward.cuh"   // the shipped kernels, which variants 3 and up run with other tiles
#include "dev/cuda/gpu_reference.h"
#include "dev/cuda/forward_variants/00_shipped.cuh"
#include "dev/cuda/forward_variants/01_naive.cuh"
#include "dev/cuda/forward_variants/02_cublas_softmax.cuh"
#include "dev/cuda/forward_variants/03_mma_sync_tiles.cuh"
#include "dev/cuda/forward_variants/04_wgmma.cuh"
#include "dev/cuda/forward_variants/05_tma_ws.cuh"

// ----------------------------------------------------------------------------
// the variant table: number, name, tile configs (names for HS 64 / HS 128), launcher

struct ForwardVariant {
    int number;
    const char* name;
    int num_configs;
    const char* configs64[9];    // nullptr: no such config at this head size
    const char* configs128[9];
    void (*launch)(const AttentionForwardParams&, int config, cudaStream_t);
    bool (*supports)(const Shape&, int config);   // nullptr: every shape the API supports, with every config
    bool slow;         // time with few repeats
    double lse_tol;    // relative LSE bound: 1e-4, or 2^-7 for a path whose scores are rounded to bf16
};

static const ForwardVariant kVariants[] = {
    {0, "shipped", 1, {"src"}, {"src"}, attention_forward0, nullptr, false, 1e-4},
    {1, "naive", 1, {"warp/row"}, {"warp/row"}, attention_forward1, nullptr, true, 1e-4},
    {2, "cublas+softmax", 1, {"cublas"}, {"cublas"}, attention_forward2, nullptr, false, 1.0 / 128},
    {3, "fa2_mma_sync", 4, {"128x64/4w", "64x64/4w", "128x64/8w", "128x32/4w"},
                           {"128x64/8w", "128x48/4w", "128x64/4w", "128x32/4w"}, attention_forward3, nullptr, false, 1e-4},
    {4, "wgmma_sm90a", 4, {"128x128/2wg", "128x64/2wg", "128x64/2wg/ovl", "128x128/2wg/ovl"},
                          {"128x64/2wg", "128x128/2wg", "128x128/2wg/pv128", nullptr},
     attention_forward4, attention_forward4_supports, false, 1e-4},
    {5, "tma_ws_sm90a", 9, {"192x128/3wg/pp", "128x128/2wg/pp", "192x128/3wg", "192x128/3wg/pp/s3", "128x128/2wg/pp/s3",
                            "128x128/2wg/pp/s4", "128x128/2wg/s3", "128x128/2wg/pp/s3/claimed", "192x128/3wg/pp/claimed"},
                           {"128x128/2wg/pp", "128x128/2wg", "128x64/2wg/pp/s3", "192x64/3wg/pp", "128x128/2wg/pp/c2",
                            "128x128/2wg/pp/c2/s3", nullptr},
     attention_forward5, attention_forward5_supports, false, 1e-4},
};
constexpr int kBaselineVariant = 2;

// ----------------------------------------------------------------------------

struct Buffers {   // one set of device tensors for a shape
    floatX* qkv; floatX* out; float* lse;
    void alloc(const Shape& s) {
        size_t n = (size_t)s.B * s.T * s.NH * s.HS;
        qkv = device_alloc<floatX>(3 * n); out = device_alloc<floatX>(n); lse = device_alloc<float>((size_t)s.B * s.NH * s.T);
    }
    void free_all() { cudaCheck(cudaFree(qkv)); cudaCheck(cudaFree(out)); cudaCheck(cudaFree(lse)); }
};

struct Row { int variant; std::string config; Shape s; float scale; bool ok; float ms_med, ms_min; };

int main(int argc, char** argv) {
    HarnessArgs args = parse_harness_args(argc, argv);
    print_device_banner();
    printf("seed %llu (fresh inputs every run; pass --seed to repeat one)\n", (unsigned long long)args.seed);
    if (!self_check_reference_forward(args.seed)) { printf("GPU reference disagrees with the CPU reference\n0 passed, 1 failed\n"); return 1; }

    std::vector<const ForwardVariant*> variants;
    for (const ForwardVariant& v : kVariants) if (args.wants(v.number)) variants.push_back(&v);
    if (variants.empty()) { fprintf(stderr, "no such variant: %s\n", argv[1]); return 1; }
    const std::vector<Shape> shapes = harness_shapes(args);
    const std::vector<float> scales = harness_scales(args);

    std::mt19937_64 rng(args.seed);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));
    std::vector<Row> rows;
    int passed = 0, failed = 0;
    for (const Shape& s : shapes) {
        if (const char* why = attention_unsupported_reason(s.B, s.T, s.NH, s.HS)) { printf("shape unsupported: %s\n", why); failed++; continue; }
        const size_t n_out = (size_t)s.B * s.T * s.NH * s.HS, n_qkv = 3 * n_out, n_lse = (size_t)s.B * s.NH * s.T;
        Buffers buf; buf.alloc(s);
        float *d_ref = device_alloc<float>(n_out), *d_ref_lse = device_alloc<float>(n_lse), *d_naive = device_alloc<float>(n_out);
        for (float scale : scales) {
            printf("\n=== B=%d T=%d NH=%d HS=%d, inputs randn x %g\n", s.B, s.T, s.NH, s.HS, scale);
            std::vector<floatX> h_qkv(n_qkv);
            fill_randn_bf16(h_qkv, scale, rng);
            to_device(buf.qkv, h_qkv);
            // references: fp32 (out + lse) and the naive bf16 computation, for the FlashAttention rule
            poison(d_ref, n_out * 4); poison(d_ref_lse, n_lse * 4); poison(d_naive, n_out * 4);
            reference_forward<false, float>(d_ref, d_ref_lse, buf.qkv, s, stream);
            reference_forward<true, float>(d_naive, nullptr, buf.qkv, s, stream);
            cudaCheck(cudaStreamSynchronize(stream));
            std::vector<float> ref = from_device(d_ref, n_out), ref_lse = from_device(d_ref_lse, n_lse), naive = from_device(d_naive, n_out);

            for (const ForwardVariant* v : variants) {
                for (int cfg = 0; cfg < v->num_configs; cfg++) {
                    const char* cfg_name = s.HS == 64 ? v->configs64[cfg] : v->configs128[cfg];
                    if (!cfg_name) continue;
                    if (!args.wants_config(v->num_configs, cfg, cfg_name) || !args.wants_shape(v->number, s)) continue;
                    if (v->supports && !v->supports(s, cfg)) {
                        printf("variant %d (%s) cfg %s: skipped, shape or GPU not supported\n", v->number, v->name, cfg_name);
                        continue;
                    }
                    printf("variant %d (%s) cfg %s\n", v->number, v->name, cfg_name);
                    AttentionForwardParams p = fused_qkv_forward_params(buf.out, buf.lse, buf.qkv, s.B, s.T, s.NH, s.HS);
                    poison(buf.out, n_out * 2); poison(buf.lse, n_lse * 4);
                    v->launch(p, cfg, stream);
                    cudaCheck(cudaGetLastError());
                    cudaCheck(cudaStreamSynchronize(stream));
                    std::vector<float> got = to_float(from_device(buf.out, n_out));
                    std::vector<float> got_lse = from_device(buf.lse, n_lse);
                    bool ok = fa_rule_check("out", got.data(), ref.data(), naive.data(), n_out, Describe{s, Describe::BTHD});
                    ok = lse_check(got_lse.data(), ref_lse.data(), n_lse, Describe{s, Describe::LSE}, true, v->lse_tol) && ok;
                    ok ? passed++ : failed++;
                    rows.push_back({v->number, cfg_name, s, scale, ok, 0.0f, 0.0f});
                }
            }
        }
        cudaCheck(cudaFree(d_ref)); cudaCheck(cudaFree(d_ref_lse)); cudaCheck(cudaFree(d_naive));

        if (args.bench) {   // time every validated config; rotate over buffer sets so the L2 never holds the inputs
            const size_t set_bytes = n_qkv * 2 + n_out * 2 + n_lse * 4;
            std::vector<Buffers> sets(num_rotating_sets(set_bytes));
            sets[0] = buf;
            for (size_t i = 1; i < sets.size(); i++) { sets[i].alloc(s); cudaCheck(cudaMemcpy(sets[i].qkv, buf.qkv, n_qkv * 2, cudaMemcpyDeviceToDevice)); }
            std::vector<const ForwardVariant*> timed = variants;   // the baseline is always timed too
            bool has_baseline = false;
            for (auto* v : timed) has_baseline |= v->number == kBaselineVariant;
            if (!has_baseline) for (const ForwardVariant& v : kVariants) if (v.number == kBaselineVariant) timed.push_back(&v);
            float baseline_ms = 0.0f;
            std::vector<size_t> shape_rows;   // indices: rows grows while we time
            for (auto* v : timed) for (int cfg = 0; cfg < v->num_configs; cfg++) {
                const char* cfg_name = s.HS == 64 ? v->configs64[cfg] : v->configs128[cfg];
                if (!cfg_name || (v->supports && !v->supports(s, cfg))) continue;
                bool validated = false;
                for (Row& r : rows) if (r.variant == v->number && r.config == cfg_name && r.s.B == s.B && r.s.T == s.T && r.s.NH == s.NH && r.s.HS == s.HS) validated = r.ok;
                if (!validated && v->number != kBaselineVariant) continue;   // never time what did not validate
                if (v->slow && args.bench_shapes) continue;                  // the naive variant: validated, not timed
                Timing tm = time_kernel([&](int i) {
                    Buffers& b = sets[i % sets.size()];
                    v->launch(fused_qkv_forward_params(b.out, b.lse, b.qkv, s.B, s.T, s.NH, s.HS), cfg, stream);
                }, v->slow ? 3 : args.repeats, stream, v->slow ? 1 : 3);
                if (v->number == kBaselineVariant) baseline_ms = tm.median_ms;
                rows.push_back({v->number, cfg_name, s, -1.0f, true, tm.median_ms, tm.min_ms});
                shape_rows.push_back(rows.size() - 1);
            }
            for (size_t ri : shape_rows) {
                const Row* r = &rows[ri];
                double tflops = attention_forward_flops(s) / (r->ms_med * 1e-3) / 1e12;
                printf("RESULT attention_forward %d cfg=%s B=%d NH=%d T=%d HS=%d ms_med=%.4f ms_min=%.4f tflops=%.1f speedup_vs_%d=%.2f\n",
                       r->variant, r->config.c_str(), s.B, s.NH, s.T, s.HS, r->ms_med, r->ms_min, tflops, kBaselineVariant,
                       baseline_ms > 0 ? baseline_ms / r->ms_med : 0.0);
            }
            for (size_t i = 1; i < sets.size(); i++) sets[i].free_all();
        }
        buf.free_all();
    }
    printf("\nattention_forward validation (out: FlashAttention rule vs fp32 reference; lse: relative 1e-4):\n");
    for (const Row& r : rows) if (r.scale >= 0)
        printf("  variant %d %-12s B=%-3d T=%-5d NH=%-3d HS=%-4d x%-2g %s\n", r.variant, r.config.c_str(), r.s.B, r.s.T, r.s.NH, r.s.HS, r.scale, r.ok ? "ok" : "FAIL");
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
