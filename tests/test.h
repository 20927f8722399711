/*
A tiny test registry for the CPU tests (plain C++, no CUDA runtime, so they run on CI's
GPU-less machine). Each tests/NAME.cpp file defines tests with TEST(name) { ... CHECK(cond); },
tests/test_main.cpp runs them all and prints "PASS: name" / "FAIL: name" lines, which
scripts/run_tests.sh counts.
*/
#pragma once
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

struct TestCase { const char* name; void (*fn)(); };
inline std::vector<TestCase>& test_registry() { static std::vector<TestCase> tests; return tests; }
inline bool& test_failed_flag() { static bool failed = false; return failed; }
struct TestRegistrar { TestRegistrar(const char* name, void (*fn)()) { test_registry().push_back({name, fn}); } };

#define TEST(name) \
    static void name(); \
    static TestRegistrar name##_registrar(#name, name); \
    static void name()

// on failure: say what and where, mark the test failed and leave the test function
#define CHECK(cond) do { if (!(cond)) { \
    fprintf(stderr, "  check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
    test_failed_flag() = true; return; } } while (0)
