// CPU tests of src/dataloader.h: good shards, shuffling, sharding across processes, and bad files.
#include <set>
#include "test.h"
#include "test_train_helpers.h"
#include "dataloader.h"

TEST(dataloader_reads_batches_in_order) {
    std::string dir = test_tmpdir(), path = dir + "/a.bin";
    write_shard(path, iota_tokens(1000));
    DataLoader loader;
    CHECK(dataloader_init(&loader, path.c_str(), 2, 8, 0, 1, 0, 50257, 42) == "");
    CHECK(dataloader_num_batches(&loader) == 999 / 16);
    CHECK(dataloader_next_batch(&loader) == "");
    for (int i = 0; i < 16; i++) CHECK(loader.inputs[i] == i && loader.targets[i] == i + 1);
    CHECK(dataloader_next_batch(&loader) == "");
    CHECK(loader.inputs[0] == 16 && loader.targets[15] == 32);
    // wraps around to the start after the last full batch
    for (size_t i = 2; i < dataloader_num_batches(&loader); i++) CHECK(dataloader_next_batch(&loader) == "");
    CHECK(dataloader_next_batch(&loader) == "");
    CHECK(loader.inputs[0] == 0 && loader.epoch == 1);
    dataloader_free(&loader);
    test_rmdir(dir);
}

TEST(dataloader_glob_orders_shards_and_processes_split_them) {
    std::string dir = test_tmpdir();
    write_shard(dir + "/s_000001.bin", iota_tokens(65, 1000));
    std::vector<uint16_t> second(65, 7);
    write_shard(dir + "/s_000002.bin", second);
    std::string pattern = dir + "/s_*.bin";
    DataLoader r0, r1;
    CHECK(dataloader_init(&r0, pattern.c_str(), 2, 8, 0, 2, 0, 50257, 42) == "");
    CHECK(dataloader_init(&r1, pattern.c_str(), 2, 8, 1, 2, 0, 50257, 42) == "");
    CHECK(r0.files.size() == 2);
    CHECK(dataloader_next_batch(&r0) == "" && dataloader_next_batch(&r1) == "");
    CHECK(r0.inputs[0] == 0 && r1.inputs[0] == 16);  // rank r reads tokens [(i*P + r)*B*T, ...)
    CHECK(dataloader_next_batch(&r0) == "" && dataloader_next_batch(&r1) == "");
    CHECK(r0.inputs[0] == 32 && r1.inputs[0] == 48);
    CHECK(dataloader_next_batch(&r0) == "");  // 64 tokens = 2 samples of 2 ranks: next is shard 2
    CHECK(r0.inputs[0] == 7);
    dataloader_free(&r0);
    dataloader_free(&r1);
    test_rmdir(dir);
}

TEST(dataloader_shuffle_is_a_seeded_permutation_and_seekable) {
    std::string dir = test_tmpdir(), path = dir + "/a.bin";
    write_shard(path, iota_tokens(16 * 10 + 1));
    DataLoader loader;
    CHECK(dataloader_init(&loader, path.c_str(), 2, 8, 0, 1, 1, 50257, 42) == "");
    std::vector<int> firsts;
    std::set<int> seen;
    for (int i = 0; i < 10; i++) {
        CHECK(dataloader_next_batch(&loader) == "");
        firsts.push_back(loader.inputs[0]);
        seen.insert(loader.inputs[0]);
    }
    CHECK(seen.size() == 10);  // every sample exactly once per epoch
    bool in_order = true;
    for (int i = 0; i < 10; i++) in_order &= firsts[i] == 16 * i;
    CHECK(!in_order);
    // resume from (epoch 0, shard 0, sample 4) gives the same 5th batch
    CHECK(dataloader_seek(&loader, 0, 0, 4) == "");
    CHECK(dataloader_next_batch(&loader) == "");
    CHECK(loader.inputs[0] == firsts[4]);
    dataloader_free(&loader);
    test_rmdir(dir);
}

TEST(dataloader_rejects_missing_file) {
    DataLoader loader;
    std::string err = dataloader_init(&loader, "/nonexistent/dir/*.bin", 2, 8, 0, 1, 0, 50257, 42);
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("no token file matches") != std::string::npos);
}

TEST(dataloader_rejects_bad_magic) {
    std::string dir = test_tmpdir(), path = dir + "/a.bin";
    write_shard(path, iota_tokens(100), 12345);
    DataLoader loader;
    std::string err = dataloader_init(&loader, path.c_str(), 2, 8, 0, 1, 0, 50257, 42);
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("bad magic 12345") != std::string::npos);
    test_rmdir(dir);
}

TEST(dataloader_rejects_wrong_version) {
    std::string dir = test_tmpdir(), path = dir + "/a.bin";
    write_shard(path, iota_tokens(100), 20240520, 7);
    DataLoader loader;
    std::string err = dataloader_init(&loader, path.c_str(), 2, 8, 0, 1, 0, 50257, 42);
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("version 7") != std::string::npos);
    test_rmdir(dir);
}

TEST(dataloader_rejects_truncated_file) {
    std::string dir = test_tmpdir(), path = dir + "/a.bin";
    write_shard(path, iota_tokens(100), 20240520, 1, 200);  // header claims 200 tokens, file holds 100
    DataLoader loader;
    std::string err = dataloader_init(&loader, path.c_str(), 2, 8, 0, 1, 0, 50257, 42);
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("truncated") != std::string::npos);
    write_bytes(path, "abc", 3);  // shorter than a header
    err = dataloader_init(&loader, path.c_str(), 2, 8, 0, 1, 0, 50257, 42);
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("truncated") != std::string::npos);
    test_rmdir(dir);
}

TEST(dataloader_rejects_too_few_tokens) {
    std::string dir = test_tmpdir(), path = dir + "/a.bin";
    write_shard(path, iota_tokens(16));  // one batch needs B*T+1 = 17
    DataLoader loader;
    std::string err = dataloader_init(&loader, path.c_str(), 2, 8, 0, 1, 0, 50257, 42);
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("fewer than") != std::string::npos);
    test_rmdir(dir);
}

TEST(dataloader_rejects_token_id_out_of_vocab) {
    std::string dir = test_tmpdir(), path = dir + "/a.bin";
    std::vector<uint16_t> tokens = iota_tokens(100);
    tokens[5] = 50257;
    write_shard(path, tokens);
    DataLoader loader;
    CHECK(dataloader_init(&loader, path.c_str(), 2, 8, 0, 1, 0, 50257, 42) == "");
    std::string err = dataloader_next_batch(&loader);
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("token id 50257 at position 5 is >= the vocab size 50257") != std::string::npos);
    dataloader_free(&loader);
    test_rmdir(dir);
}
