// Runs every TEST registered by the tests/*.cpp files. ./tests/test_cpu [name-substring]
#include <cstring>
#include "test.h"

int main(int argc, char** argv) {
    int passed = 0, failed = 0;
    for (const TestCase& t : test_registry()) {
        if (argc > 1 && !strstr(t.name, argv[1])) continue;
        test_failed_flag() = false;
        t.fn();
        if (test_failed_flag()) { printf("FAIL: %s\n", t.name); failed++; }
        else { printf("PASS: %s\n", t.name); passed++; }
        fflush(stdout);
    }
    printf("cpu tests: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
