// CPU tests of src/tokenizer.h: llm.c's gpt2_tokenizer.bin decode, and bad files.
#include "test.h"
#include "test_train_helpers.h"
#include "tokenizer.h"

static void write_tokenizer(const std::string& path, const std::vector<std::string>& tokens, uint32_t magic = 20240328,
                            uint32_t version = 2, bool truncate = false) {
    uint32_t header[256] = {0};
    header[0] = magic;
    header[1] = version;
    header[2] = (uint32_t)tokens.size();
    header[3] = (uint32_t)tokens.size() - 1;
    FILE* fp = fopen(path.c_str(), "wb");
    fwrite(header, sizeof(uint32_t), 256, fp);
    for (size_t i = 0; i < tokens.size(); i++) {
        if (truncate && i == tokens.size() - 1) break;
        unsigned char len = (unsigned char)tokens[i].size();
        fwrite(&len, 1, 1, fp);
        fwrite(tokens[i].data(), 1, len, fp);
    }
    fclose(fp);
}

TEST(tokenizer_decodes_tokens) {
    std::string dir = test_tmpdir(), path = dir + "/tok.bin";
    write_tokenizer(path, {"Hello", ",", " world", "\n", "<|endoftext|>"});
    Tokenizer tok;
    CHECK(tokenizer_init(&tok, path.c_str()) == "");
    CHECK(tok.vocab_size == 5 && tok.eot_token == 4);
    CHECK(std::string(tokenizer_decode(&tok, 0)) == "Hello");
    CHECK(std::string(tokenizer_decode(&tok, 2)) == " world");
    CHECK(std::string(tokenizer_decode(&tok, 4)) == "<|endoftext|>");
    CHECK(tokenizer_decode(&tok, 5) == nullptr);
    tokenizer_free(&tok);
    test_rmdir(dir);
}

TEST(tokenizer_rejects_bad_files) {
    std::string dir = test_tmpdir(), path = dir + "/tok.bin";
    Tokenizer tok;
    std::string err = tokenizer_init(&tok, (dir + "/missing.bin").c_str());
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("could not be opened") != std::string::npos);
    write_tokenizer(path, {"a", "b"}, 1234);
    err = tokenizer_init(&tok, path.c_str());
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("bad magic") != std::string::npos);
    write_tokenizer(path, {"a", "b", "c"}, 20240328, 2, true);
    err = tokenizer_init(&tok, path.c_str());
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("truncated") != std::string::npos && !tok.init_ok);
    test_rmdir(dir);
}
