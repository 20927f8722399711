/*
File and memory helpers that check every call and exit with a clear message on failure
(llm.c's fopenCheck/freadCheck idea). CUDA-free, so the CPU tests compile it with g++.
Code that must report an error instead of exiting (validation, see config.h) does its own
checks and returns a std::string.
*/
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cerrno>
#include <string>

inline FILE* fopen_check(const char* path, const char* mode, const char* file, int line) {
    FILE* fp = fopen(path, mode);
    if (fp == nullptr) {
        fprintf(stderr, "error: could not open '%s' (mode %s): %s [%s:%d]\n", path, mode, strerror(errno), file, line);
        exit(EXIT_FAILURE);
    }
    return fp;
}
#define fopenCheck(path, mode) fopen_check(path, mode, __FILE__, __LINE__)

inline void fread_check(void* ptr, size_t size, size_t nmemb, FILE* stream, const char* file, int line) {
    size_t result = fread(ptr, size, nmemb, stream);
    if (result != nmemb) {
        fprintf(stderr, "error: short read (%zu of %zu items of %zu bytes): %s [%s:%d]\n", result, nmemb, size,
                feof(stream) ? "file truncated" : "read error", file, line);
        exit(EXIT_FAILURE);
    }
}
#define freadCheck(ptr, size, nmemb, stream) fread_check(ptr, size, nmemb, stream, __FILE__, __LINE__)

inline void fwrite_check(const void* ptr, size_t size, size_t nmemb, FILE* stream, const char* file, int line) {
    size_t result = fwrite(ptr, size, nmemb, stream);
    if (result != nmemb) {
        fprintf(stderr, "error: short write (%zu of %zu items): %s [%s:%d]\n", result, nmemb, strerror(errno), file, line);
        exit(EXIT_FAILURE);
    }
}
#define fwriteCheck(ptr, size, nmemb, stream) fwrite_check(ptr, size, nmemb, stream, __FILE__, __LINE__)

inline void fclose_check(FILE* fp, const char* file, int line) {
    if (fclose(fp) != 0) {
        fprintf(stderr, "error: fclose failed: %s [%s:%d]\n", strerror(errno), file, line);
        exit(EXIT_FAILURE);
    }
}
#define fcloseCheck(fp) fclose_check(fp, __FILE__, __LINE__)

inline void* malloc_check(size_t size, const char* file, int line) {
    void* ptr = malloc(size);
    if (ptr == nullptr) {
        fprintf(stderr, "error: malloc of %zu bytes failed [%s:%d]\n", size, file, line);
        exit(EXIT_FAILURE);
    }
    return ptr;
}
#define mallocCheck(size) malloc_check(size, __FILE__, __LINE__)

// size of a file in bytes, or -1 if it cannot be opened
inline long long file_size_bytes(const char* path) {
    FILE* fp = fopen(path, "rb");
    if (fp == nullptr) return -1;
    fseek(fp, 0, SEEK_END);
    long long size = ftell(fp);
    fclose(fp);
    return size;
}

// printf-style std::string, for the error messages the validation functions return
inline std::string strfmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
#include <cstdarg>
inline std::string strfmt(const char* fmt, ...) {
    char buf[1024];
    va_list args;
    va_start(args, fmt);
    vsnprintf(buf, sizeof(buf), fmt, args);
    va_end(args);
    return std::string(buf);
}

// the callers' side of "validation returns an error string": one line on stderr, non-zero exit
inline void exit_on_error(const std::string& err) {
    if (err.empty()) return;
    fprintf(stderr, "error: %s\n", err.c_str());
    exit(EXIT_FAILURE);
}
