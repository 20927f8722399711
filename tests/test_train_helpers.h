// Helpers shared by the tests/test_train_*.cpp CPU tests: temp files and token shards.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include <unistd.h>

// a fresh empty directory under /tmp, removed by the caller's test_rmdir
inline std::string test_tmpdir() {
    char tmpl[] = "/tmp/flashgpt_test_XXXXXX";
    const char* d = mkdtemp(tmpl);
    return d ? std::string(d) : std::string("/tmp");
}

inline void test_rmdir(const std::string& dir) {
    std::string cmd = "rm -rf '" + dir + "'";
    if (system(cmd.c_str()) != 0) fprintf(stderr, "could not remove %s\n", dir.c_str());
}

inline void write_bytes(const std::string& path, const void* data, size_t bytes) {
    FILE* fp = fopen(path.c_str(), "wb");
    if (!fp) return;
    fwrite(data, 1, bytes, fp);
    fclose(fp);
}

// an llm.c token shard: header (magic, version, ntok) + uint16 tokens; header_ntok overrides the count
inline void write_shard(const std::string& path, const std::vector<uint16_t>& tokens, int magic = 20240520,
                        int version = 1, long header_ntok = -1) {
    int header[256] = {0};
    header[0] = magic;
    header[1] = version;
    header[2] = header_ntok >= 0 ? (int)header_ntok : (int)tokens.size();
    FILE* fp = fopen(path.c_str(), "wb");
    if (!fp) return;
    fwrite(header, sizeof(int), 256, fp);
    fwrite(tokens.data(), sizeof(uint16_t), tokens.size(), fp);
    fclose(fp);
}

inline std::vector<uint16_t> iota_tokens(size_t n, int modulo = 50257) {
    std::vector<uint16_t> t(n);
    for (size_t i = 0; i < n; i++) t[i] = (uint16_t)(i % modulo);
    return t;
}
