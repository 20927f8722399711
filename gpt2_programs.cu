/*
train_gpt2cu, test_gpt2cu, profile_gpt2cu and generate_gpt2cu as one program, so that train_gpt2.cu's kernels, which
each of them includes, compile once for the four: train_gpt2.cu, test_gpt2.cu, generate_gpt2.cu and
profile/profile_gpt2.cu keep their own main (renamed here), and the program runs the one its name says (argv[0], which
make links to this build under the four names).

  make train_gpt2cu test_gpt2cu     (either builds build/gpt2_programs once and links the names to it)
*/
#define main train_gpt2_main
#include "train_gpt2.cu"
#undef main
#define main test_gpt2_main
#include "test_gpt2.cu"
#undef main
#define main generate_gpt2_main
#include "generate_gpt2.cu"
#undef main
#define main profile_gpt2_main
#include "profile/profile_gpt2.cu"
#undef main

int main(int argc, char** argv) {
    const char* slash = strrchr(argv[0], '/');
    const char* name = slash ? slash + 1 : argv[0];
    auto named = [&](const char* prefix) { return strncmp(name, prefix, strlen(prefix)) == 0; };
    if (named("test_gpt2")) return test_gpt2_main(argc, argv);
    if (named("generate_gpt2")) return generate_gpt2_main(argc, argv);
    if (named("profile_gpt2")) return profile_gpt2_main(argc, argv);
    return train_gpt2_main(argc, argv);   // train_gpt2cu, or any other name
}
