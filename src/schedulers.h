/*
Learning-rate schedules, CUDA-free: linear warmup over `warmup_iterations` steps, then decay to
final_frac * lr at train_num_steps: cosine (default), linear, or constant (no decay).
*/
#pragma once
#include <cmath>
#include <cstring>

typedef struct {
    const char* type;        // "cosine" | "linear" | "constant"
    float learning_rate;
    int warmup_iterations;
    int train_num_steps;
    float final_learning_rate_frac;
} LearningRateScheduler;

inline void lr_scheduler_init(LearningRateScheduler* s, const char* type, float learning_rate, int warmup_iterations,
                              int train_num_steps, float final_learning_rate_frac) {
    s->type = type;
    s->learning_rate = learning_rate;
    s->warmup_iterations = warmup_iterations;
    s->train_num_steps = train_num_steps;
    s->final_learning_rate_frac = final_learning_rate_frac;
}

inline float get_learning_rate(const LearningRateScheduler* s, int step) {
    float lr = s->learning_rate;
    if (step < s->warmup_iterations) return lr * (float)(step + 1) / (float)s->warmup_iterations;
    if (strcmp(s->type, "constant") == 0) return lr;
    float min_lr = lr * s->final_learning_rate_frac;
    int decay_steps = s->train_num_steps - s->warmup_iterations;
    float ratio = decay_steps > 0 ? (float)(step - s->warmup_iterations) / (float)decay_steps : 1.0f;
    ratio = fminf(fmaxf(ratio, 0.0f), 1.0f);
    if (strcmp(s->type, "linear") == 0) return lr - ratio * (lr - min_lr);
    float coeff = 0.5f * (1.0f + cosf((float)M_PI * ratio));  // 1 -> 0
    return min_lr + coeff * (lr - min_lr);
}
