// CPU tests of src/checkpoint.h: model/state header round trips, refusals, atomic writes, DONE markers.
#include "test.h"
#include "test_train_helpers.h"
#include "checkpoint.h"

static GPT2Config d12() {
    GPT2Config c;
    parse_model_descriptor("d12", &c);
    return c;
}

TEST(checkpoint_model_header_round_trip) {
    int header[CKPT_HEADER_INTS];
    model_header_fill(header, d12());
    CHECK(header[0] == 20240326 && header[1] == 5 && header[2] == 1024 && header[3] == 50257);
    CHECK(header[4] == 12 && header[5] == 12 && header[6] == 768 && header[7] == 50304);
    GPT2Config c;
    CHECK(model_header_parse(header, "x", &c) == "");
    CHECK(model_config_equal(c, d12()));
    CHECK(count_parameters(c) == 124475904ull);  // llm.c's padded 124M
}

TEST(checkpoint_model_file_checks) {
    std::string dir = test_tmpdir(), path = dir + "/model.bin";
    GPT2Config c = d12();
    c.num_layers = 1;  // a small file: one layer of d12
    int header[CKPT_HEADER_INTS];
    model_header_fill(header, c);
    std::vector<uint16_t> params(count_parameters(c), 0);
    CHECK(write_file_atomic(path.c_str(), {{header, sizeof(header)}, {params.data(), params.size() * 2}}) == "");
    GPT2Config read;
    CHECK(model_file_check(path.c_str(), &read) == "");
    CHECK(model_config_equal(read, c));
    // fp32 (version 3): refused by this bf16 build
    header[1] = 3;
    CHECK(write_file_atomic(path.c_str(), {{header, sizeof(header)}, {params.data(), params.size() * 2}}) == "");
    std::string err = model_file_check(path.c_str(), &read);
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("fp32 (version 3)") != std::string::npos);
    // truncated
    header[1] = 5;
    CHECK(write_file_atomic(path.c_str(), {{header, sizeof(header)}, {params.data(), params.size()}}) == "");
    err = model_file_check(path.c_str(), &read);
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("truncated or corrupt") != std::string::npos);
    // bad magic
    header[0] = 7;
    CHECK(write_file_atomic(path.c_str(), {{header, sizeof(header)}}) == "");
    err = model_file_check(path.c_str(), &read);
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("bad magic") != std::string::npos);
    test_rmdir(dir);
}

TEST(checkpoint_state_header_round_trip_and_compatibility) {
    TrainState s = {1, 0, 1, 1, 1234, 0x123456789abcdefull, 3, 77, 2, 124475904ull};
    int header[CKPT_HEADER_INTS];
    state_header_fill(header, s);
    CHECK(header[0] == 20240527 && header[1] == 1 && header[10] == 1234);
    TrainState r;
    CHECK(state_header_parse(header, "x", &r) == "");
    CHECK(r.step == 1234 && r.rng_state == s.rng_state && r.shard_idx == 3 && r.sample_idx == 77 && r.epoch == 2);
    CHECK(r.num_parameters == s.num_parameters && r.use_master_weights == 1 && r.shuffle == 1);
    // a state of another model size is refused
    std::string err = state_check_compatible(r, "state.bin", 354871296ull, 1, 0, 1);
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("parameters") != std::string::npos);
    err = state_check_compatible(r, "state.bin", s.num_parameters, 1, 0, 0);
    CHECK(err.find("use_master_weights") != std::string::npos);
    CHECK(r.fp8_updates == 0 && r.fp8_mode == 0 && r.fp8_state_bytes == 0);   // a state without -fp8
}

TEST(checkpoint_state_header_fp8_scales) {
    // -fp8: the scales' updates, the mode and the scaling state's size round-trip, and the state's size counts them
    TrainState s = {1, 0, 1, 1, 1234, 7ull, 3, 77, 2, 1000ull, 17, 2, 12345ull};
    int header[CKPT_HEADER_INTS];
    state_header_fill(header, s);
    TrainState r;
    CHECK(state_header_parse(header, "x", &r) == "");
    CHECK(r.fp8_updates == 17 && r.fp8_mode == 2 && r.fp8_state_bytes == 12345ull && r.num_parameters == 1000ull);
    std::string dir = test_tmpdir();
    std::string path = dir + "/state.bin";
    std::vector<char> body(1000 * sizeof(float) * 3 + 12345, 0);
    CHECK(write_file_atomic(path.c_str(), {{header, sizeof(header)}, {body.data(), body.size()}}) == "");
    CHECK(state_check_compatible(r, path.c_str(), 1000, 1, 0, 1) == "");
    r.fp8_state_bytes = 0;   // the same file read as a state without FP8: its size no longer fits
    CHECK(state_check_compatible(r, path.c_str(), 1000, 1, 0, 1).find("truncated or corrupt") != std::string::npos);
    remove(path.c_str());
    test_rmdir(dir);
}

TEST(checkpoint_atomic_write_and_done_markers) {
    std::string dir = test_tmpdir();
    CHECK(find_latest_checkpoint_step(dir.c_str()) == -1);
    std::string path = checkpoint_model_path(dir.c_str(), 20);
    CHECK(path == dir + "/model_00000020.bin");
    int data[4] = {1, 2, 3, 4};
    CHECK(write_file_atomic(path.c_str(), {{data, sizeof(data)}}) == "");
    CHECK(file_size_bytes(path.c_str()) == 16 && file_size_bytes((path + ".tmp").c_str()) == -1);
    CHECK(find_latest_checkpoint_step(dir.c_str()) == -1);  // no DONE marker yet: incomplete
    CHECK(write_file_atomic(checkpoint_done_path(dir.c_str(), 20).c_str(), {}) == "");
    CHECK(write_file_atomic(checkpoint_done_path(dir.c_str(), 100).c_str(), {}) == "");
    CHECK(write_file_atomic((dir + "/DONE_00000100.tmp").c_str(), {}) == "");
    CHECK(find_latest_checkpoint_step(dir.c_str()) == 100);
    // an unwritable target leaves nothing behind and says why
    std::string err = write_file_atomic("/nonexistent_dir/x.bin", {{data, sizeof(data)}});
    CHECK(!err.empty());
    test_rmdir(dir);
}
