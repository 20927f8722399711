// CPU tests of src/config.h (flags and validation), src/schedulers.h, src/mfu.h and src/rand.h.
#include <cmath>
#include <cstring>
#include <vector>
#include "test.h"
#include "config.h"
#include "schedulers.h"
#include "mfu.h"
#include "rand.h"

static std::string parse(TrainConfig* c, std::vector<const char*> args) {
    train_config_defaults(c);
    args.insert(args.begin(), "train_gpt2cu");
    std::string err = train_config_parse(c, (int)args.size(), (char**)args.data());
    if (!err.empty()) return err;
    return train_config_check(c);
}

TEST(config_parses_llmc_flags) {
    TrainConfig c;
    CHECK(parse(&c, {"-i", "tr*.bin", "-j", "va*.bin", "-e", "d24", "-o", "log", "-b", "8", "-t", "512", "-d", "8192",
                     "-x", "100", "-l", "6e-4", "-u", "10", "-q", "0.1", "-c", "0.1", "-k", "linear", "-v", "5", "-m", "3",
                     "-s", "7", "-g", "32", "-r", "2", "-w", "0", "-ge", "1", "-n", "50", "-nk", "2", "-y", "1", "-sd", "7", "-sr", "0", "-dm", "1"}) == "");
    CHECK(!strcmp(c.train_data_pattern, "tr*.bin") && !strcmp(c.val_data_pattern, "va*.bin") && !strcmp(c.load_filename, "d24"));
    CHECK(c.B == 8 && c.T == 512 && c.total_batch_size == 8192 && c.max_steps == 100);
    CHECK(fabsf(c.learning_rate - 6e-4f) < 1e-9f && c.warmup_iterations == 10 && fabsf(c.final_learning_rate_frac - 0.1f) < 1e-7f);
    CHECK(!strcmp(c.lr_scheduler_type, "linear") && c.val_loss_every == 5 && c.val_max_steps == 3 && c.sample_every == 7);
    CHECK(c.gen_T == 32 && c.recompute == 2 && c.use_master_weights == 0 && c.gelu_fusion == 1 && c.checkpoint_every == 50);
    CHECK(c.checkpoints_keep == 2 && c.resume == 1 && c.seed == 7 && c.shuffle == 1 && c.stochastic_rounding == 0);
    CHECK(c.document_masking == 1);
}

TEST(config_defaults) {
    TrainConfig c;
    CHECK(parse(&c, {}) == "");
    CHECK(c.B == 4 && c.T == 1024 && c.total_batch_size == 4096 && c.recompute == 1 && c.use_master_weights == 1);
    CHECK(!strcmp(c.load_filename, "d12") && c.shuffle == 1 && c.stochastic_rounding == 1 && c.document_masking == 0);
    CHECK(parse(&c, {"-a", "1"}) == "" && c.shuffle == 0);  // overfitting one batch: no shuffle
}

TEST(config_rejects_bad_arguments) {
    TrainConfig c;
    std::string err = parse(&c, {"-b", "4", "-t", "1024", "-d", "10000"});
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("not divisible by B*T") != std::string::npos);
    CHECK(parse(&c, {"-b", "four"}).find("not a valid number") != std::string::npos);
    CHECK(parse(&c, {"-zz", "1"}).find("unknown flag") != std::string::npos);
    CHECK(parse(&c, {"-b"}).find("needs a value") != std::string::npos);
    CHECK(parse(&c, {"notaflag", "1"}).find("unknown argument") != std::string::npos);
    CHECK(parse(&c, {"-r", "3"}).find("recompute") != std::string::npos);
    CHECK(parse(&c, {"-k", "step"}).find("scheduler") != std::string::npos);
    CHECK(parse(&c, {"-sr", "2"}).find("-sr must be 0 or 1") != std::string::npos);
    CHECK(parse(&c, {"-y", "1"}).find("needs -o") != std::string::npos);
    CHECK(parse(&c, {"-pn", "2"}).find("one process") != std::string::npos);
    CHECK(parse(&c, {"-h", "1"}).find("HellaSwag") != std::string::npos);
    CHECK(parse(&c, {"-pm", "2"}).find("-pm must be 0 or 1") != std::string::npos);
    CHECK(parse(&c, {"-fp8", "3"}).find("-fp8 3") != std::string::npos);
    CHECK(parse(&c, {"-fp88", "1"}).find("unknown argument") != std::string::npos);
    CHECK(parse(&c, {"-fp8", "1"}) == "" && c.fp8 == 1);
}

TEST(config_memory_plan_flag) {
    TrainConfig c;
    CHECK(parse(&c, {}) == "" && c.memory_plan_only == 0);
    CHECK(parse(&c, {"-e", "d48", "-b", "16", "-pm", "1"}) == "" && c.memory_plan_only == 1 && c.B == 16);
    CHECK(strstr(train_usage(), "-pm <int>") != nullptr);
}

TEST(config_checks_against_the_model) {
    TrainConfig c;
    CHECK(parse(&c, {"-t", "2048", "-d", "8192"}) == "");
    GPT2Config m;
    CHECK(parse_model_descriptor("d12", &m) == "");
    std::string err = train_config_check_model(c, m);
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("larger than the model's max sequence length 1024") != std::string::npos);
    CHECK(parse_model_descriptor("d13", &m).find("depth") != std::string::npos);
    CHECK(parse_model_descriptor("gpt2:d48", &m) == "" && m.channels == 1600 && m.num_heads == 25);
    CHECK(is_model_descriptor("d12") && is_model_descriptor("gpt2:d24") && !is_model_descriptor("dev/model.bin"));
}

TEST(config_rejects_old_gpus) {
    std::string err = gpu_check_compute_capability(7, 5, "Tesla T4");
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("sm_80 or newer") != std::string::npos);
    CHECK(gpu_check_compute_capability(8, 0, "A100") == "" && gpu_check_compute_capability(9, 0, "H100") == "");
}

TEST(scheduler_warmup_and_cosine) {
    LearningRateScheduler s;
    lr_scheduler_init(&s, "cosine", 1.0f, 10, 110, 0.1f);
    CHECK(fabsf(get_learning_rate(&s, 0) - 0.1f) < 1e-6f);
    CHECK(fabsf(get_learning_rate(&s, 9) - 1.0f) < 1e-6f);
    CHECK(fabsf(get_learning_rate(&s, 10) - 1.0f) < 1e-6f);
    CHECK(fabsf(get_learning_rate(&s, 60) - 0.55f) < 1e-5f);  // halfway: midpoint of 1 and 0.1
    CHECK(fabsf(get_learning_rate(&s, 110) - 0.1f) < 1e-6f);
    lr_scheduler_init(&s, "linear", 1.0f, 0, 100, 0.0f);
    CHECK(fabsf(get_learning_rate(&s, 25) - 0.75f) < 1e-6f);
    lr_scheduler_init(&s, "constant", 1.0f, 0, 100, 0.0f);
    CHECK(get_learning_rate(&s, 99) == 1.0f);
}

TEST(mfu_peak_table_and_formula) {
    CHECK(fabs(get_peak_bf16_flops("NVIDIA H100 80GB HBM3") - 989.4e12) < 1e9);
    CHECK(fabs(get_peak_bf16_flops("NVIDIA H100 PCIe") - 756.5e12) < 1e9);
    CHECK(fabs(get_peak_bf16_flops("NVIDIA H200") - 989.4e12) < 1e9);
    CHECK(fabs(get_peak_bf16_flops("NVIDIA A100-SXM4-80GB") - 312e12) < 1e9);
    CHECK(get_peak_bf16_flops("Some Future GPU") < 0);
    // d12, T=1024: 6 * 124475904 + 6 * 12 * 768 * 1024
    CHECK(gpt2_flops_per_token(124475904ull, 12, 768, 1024) == 6.0 * 124475904 + 6.0 * 12 * 768 * 1024);
}

TEST(rand_mt19937_matches_the_reference_sequence) {
    // the 10000th output of the standard mt19937 seeded with 5489 is 4123659995 (C++11 [rand.predef])
    mt19937_state s;
    mt19937_init(&s, 5489);
    uint32_t v = 0;
    for (int i = 0; i < 10000; i++) v = mt19937_u32(&s);
    CHECK(v == 4123659995u);
    std::vector<int> perm(100);
    mt19937_permutation(&s, perm.data(), 100);
    std::vector<int> seen(100, 0);
    for (int p : perm) seen[p]++;
    for (int k : seen) CHECK(k == 1);
}

// multi-GPU flags: the rank within -pn, the rendezvous method, the timeout; -pn 0 (the default) resolves to one
// process here
TEST(config_multi_gpu_flags) {
    TrainConfig c;
    CHECK(parse(&c, {}) == "" && c.multi_gpu_timeout == 300);
    CHECK(parse(&c, {"-pt", "20"}) == "" && c.multi_gpu_timeout == 20);
    CHECK(parse(&c, {"-pt", "0"}).find("-pt 0") != std::string::npos);
    CHECK(strstr(train_usage(), "-pt <int>") != nullptr);
    CHECK(parse(&c, {"-pn", "2", "-pr", "2"}).find("0..pn-1") != std::string::npos);
    CHECK(parse(&c, {"-pi", "mpi"}).find("fs or tcp") != std::string::npos);
    CHECK(parse(&c, {"-pi", "tcp", "-ps", "node0:29501", "-pf", "/shared"}) == "" && !strcmp(c.init_method, "tcp") &&
          !strcmp(c.init_tcp, "node0:29501") && !strcmp(c.init_fs_dir, "/shared") && c.num_processes == 1);
#ifndef FLASHGPT_NCCL
    CHECK(parse(&c, {"-pn", "2"}).find("no NCCL") != std::string::npos);
#endif
}
