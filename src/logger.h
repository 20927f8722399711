/*
Logging, CUDA-free: main.log in the output dir with llm.c's line formats
("s:%d trl:%.4f lr:%.6f norm:%.2f", "s:%d tel:%.4f"), and a rolling z-score tracker for the
loss and the grad norm (printed per step, optionally used to skip outlier updates).
*/
#pragma once
#include <cstdio>
#include <cmath>
#include "utils.h"

typedef struct {
    int active;
    char output_log_file[512];
} Logger;

// resuming appends; a fresh run truncates. Call only after every input has been validated.
inline void logger_init(Logger* logger, const char* log_dir, int resuming) {
    logger->active = 0;
    if (log_dir == nullptr) return;
    logger->active = 1;
    snprintf(logger->output_log_file, sizeof(logger->output_log_file), "%s/main.log", log_dir);
    FILE* fp = fopenCheck(logger->output_log_file, resuming ? "a" : "w");
    fclose(fp);
}

inline void logger_log_train(Logger* logger, int step, float train_loss, float learning_rate, float grad_norm) {
    if (!logger->active) return;
    FILE* fp = fopenCheck(logger->output_log_file, "a");
    fprintf(fp, "s:%d trl:%.4f lr:%.6f norm:%.2f\n", step, train_loss, learning_rate, grad_norm);
    fclose(fp);
}

inline void logger_log_val(Logger* logger, int step, float val_loss) {
    if (!logger->active) return;
    FILE* fp = fopenCheck(logger->output_log_file, "a");
    fprintf(fp, "s:%d tel:%.4f\n", step, val_loss);
    fclose(fp);
}

// ----------------------------------------------------------------------------
// z-score of a value against the last OUTLIER_WINDOW values

#define OUTLIER_WINDOW 128

typedef struct {
    double buffer[OUTLIER_WINDOW];
    int count, index;
    double sum, sum_sq;
} OutlierDetector;

inline void outlier_detector_init(OutlierDetector* d) {
    d->count = 0; d->index = 0; d->sum = 0.0; d->sum_sq = 0.0;
    for (int i = 0; i < OUTLIER_WINDOW; i++) d->buffer[i] = 0.0;
}

// returns the z-score of x against the window before adding it (NAN while the window fills)
inline double outlier_detector_update(OutlierDetector* d, double x) {
    double z = NAN;
    if (d->count == OUTLIER_WINDOW) {
        double mean = d->sum / OUTLIER_WINDOW;
        double var = d->sum_sq / OUTLIER_WINDOW - mean * mean;
        double std = var > 0.0 ? sqrt(var) : 0.0;
        z = std > 0.0 ? (x - mean) / std : 0.0;
        double old = d->buffer[d->index];
        d->sum -= old; d->sum_sq -= old * old;
    } else {
        d->count++;
    }
    d->buffer[d->index] = x;
    d->sum += x; d->sum_sq += x * x;
    d->index = (d->index + 1) % OUTLIER_WINDOW;
    return z;
}
