/*
A GPU timeline of a stretch of work without nsys: CUPTI's activity API records every kernel, memcpy and
memset with its GPU start and end (ns) and its stream, and timeline_stop writes them as CSV for
profile/step_timeline.py:

    kind,name,start_us,end_us,stream       kind = kernel | memcpy | memset; names demangled;
                                           times in µs from the first record's start

Tracing serialises nothing: kernels queue and run as in training, so the gaps between them are the real
ones. CUPTI adds some host time to each launch, which shows only where the host cannot stay ahead of the GPU.
libcupti is opened at run time (dlopen), so the binary starts without it and only --timeline needs it; the
Makefile passes the toolkit's libcupti path (CUPTI_LIBRARY) and its include folder (cupti.h sits in include/
or extras/CUPTI/include). Without cupti.h at build time, timeline_start says so.

  timeline_start();  ... the work ...;  timeline_stop("step.csv");
*/
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>
#include <cxxabi.h>
#include <cuda_runtime.h>
#include "utils.h"
#if __has_include(<cupti.h>)
#include <cupti.h>
#include <dlfcn.h>
#define TIMELINE_HAS_CUPTI 1
#else
#define TIMELINE_HAS_CUPTI 0
#endif
#ifndef CUPTI_LIBRARY
#define CUPTI_LIBRARY "libcupti.so"
#endif

struct TimelineRecord {
    const char* kind;       // "kernel", "memcpy", "memset"
    std::string name;
    uint64_t start_ns, end_ns;
    uint32_t stream;
};

inline std::vector<TimelineRecord>& timeline_records() { static std::vector<TimelineRecord> records; return records; }
inline std::mutex& timeline_mutex() { static std::mutex m; return m; }   // CUPTI hands buffers back on its own thread

// "_Z24attention_forward_kernelILi64EEvv" -> "void attention_forward_kernel<64>()"; C names pass through
inline std::string timeline_demangle(const char* name) {
    if (name == nullptr) return "?";
    int status = 0;
    char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    std::string s = status == 0 && d ? d : name;
    free(d);
    return s;
}

// one CSV field: quoted, with inner quotes doubled (kernel names hold commas)
inline std::string timeline_csv_field(const std::string& s) {
    std::string out = "\"";
    for (char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return out + "\"";
}

#if TIMELINE_HAS_CUPTI
// The newest record layouts of the header at hand; the fields read here (start, end, streamId, name, bytes,
// copyKind) sit at the same place in every version since CUDA 11.
#if CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityKernel10 TimelineKernelRecord;
typedef CUpti_ActivityMemcpy6 TimelineMemcpyRecord;
#else
typedef CUpti_ActivityKernel9 TimelineKernelRecord;
typedef CUpti_ActivityMemcpy5 TimelineMemcpyRecord;
#endif
typedef CUpti_ActivityMemset4 TimelineMemsetRecord;

// the CUPTI entry points, looked up in libcupti at run time
struct CuptiApi {
    decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
    decltype(&cuptiActivityEnable) enable = nullptr;
    decltype(&cuptiActivityDisable) disable = nullptr;
    decltype(&cuptiActivityFlushAll) flush_all = nullptr;
    decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
    decltype(&cuptiActivityGetNumDroppedRecords) num_dropped = nullptr;
    decltype(&cuptiGetResultString) result_string = nullptr;
};
inline CuptiApi& cupti_api() { static CuptiApi api; return api; }

inline std::string cupti_load() {
    CuptiApi& api = cupti_api();
    if (api.enable) return "";
    void* lib = dlopen(CUPTI_LIBRARY, RTLD_NOW);
    if (!lib) lib = dlopen("libcupti.so", RTLD_NOW);
    if (!lib) return strfmt("--timeline needs libcupti: neither %s nor libcupti.so could be opened (%s); add the CUDA "
                            "toolkit's CUPTI library folder to LD_LIBRARY_PATH", CUPTI_LIBRARY, dlerror());
    bool ok = true;
    auto get = [&](auto& fn, const char* name) { fn = (std::remove_reference_t<decltype(fn)>)dlsym(lib, name); ok = ok && fn; };
    get(api.register_callbacks, "cuptiActivityRegisterCallbacks");
    get(api.enable, "cuptiActivityEnable");
    get(api.disable, "cuptiActivityDisable");
    get(api.flush_all, "cuptiActivityFlushAll");
    get(api.next_record, "cuptiActivityGetNextRecord");
    get(api.num_dropped, "cuptiActivityGetNumDroppedRecords");
    get(api.result_string, "cuptiGetResultString");
    if (!ok) { api.enable = nullptr; return "libcupti lacks an activity API entry point"; }
    return "";
}

inline std::string cupti_error(CUptiResult r, const char* what) {
    if (r == CUPTI_SUCCESS) return "";
    const char* msg = "?";
    if (cupti_api().result_string) cupti_api().result_string(r, &msg);
    return strfmt("CUPTI %s: %s", what, msg);
}

// CUPTI asks for a buffer to fill, then hands it back full (or at a flush)
inline void CUPTIAPI timeline_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *size = (size_t)8 << 20;
    *buffer = (uint8_t*)aligned_alloc(8, *size);   // CUPTI wants 8-byte aligned buffers
    *max_records = 0;                                // as many as fit
}

inline void CUPTIAPI timeline_buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_bytes) {
    std::lock_guard<std::mutex> lock(timeline_mutex());
    CUpti_Activity* record = nullptr;
    while (cupti_api().next_record(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
        if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const TimelineKernelRecord* k = (const TimelineKernelRecord*)record;
            timeline_records().push_back({"kernel", timeline_demangle(k->name), k->start, k->end, k->streamId});
        } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const TimelineMemcpyRecord* m = (const TimelineMemcpyRecord*)record;
            const char* dir = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD ? "HtoD"
                            : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "DtoH"
                            : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD ? "DtoD" : "other";
            timeline_records().push_back({"memcpy", strfmt("memcpy %s %llu B", dir, (unsigned long long)m->bytes), m->start,
                                          m->end, m->streamId});
        } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const TimelineMemsetRecord* m = (const TimelineMemsetRecord*)record;
            timeline_records().push_back({"memset", strfmt("memset %llu B", (unsigned long long)m->bytes), m->start, m->end,
                                          m->streamId});
        }
    }
    free(buffer);
}

static const CUpti_ActivityKind kTimelineKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                                    CUPTI_ACTIVITY_KIND_MEMSET};

// Starts recording; "" or why not. Call it after a warmup, so module loading and cuBLASLt's heuristics stay out.
inline std::string timeline_start() {
    std::string err = cupti_load();
    if (!err.empty()) return err;
    timeline_records().clear();
    err = cupti_error(cupti_api().register_callbacks(timeline_buffer_requested, timeline_buffer_completed), "register callbacks");
    for (CUpti_ActivityKind kind : kTimelineKinds)
        if (err.empty()) err = cupti_error(cupti_api().enable(kind), "enable");
    return err;
}

// Waits for the GPU, stops recording and writes the CSV; "" or an error.
inline std::string timeline_stop(const char* path) {
    cudaError_t sync = cudaDeviceSynchronize();
    if (sync != cudaSuccess) return strfmt("timeline_stop: %s", cudaGetErrorString(sync));
    std::string err;
    for (CUpti_ActivityKind kind : kTimelineKinds)
        if (err.empty()) err = cupti_error(cupti_api().disable(kind), "disable");
    if (err.empty()) err = cupti_error(cupti_api().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flush");
    if (!err.empty()) return err;
    size_t dropped = 0;
    cupti_api().num_dropped(nullptr, 0, &dropped);
    std::lock_guard<std::mutex> lock(timeline_mutex());
    std::vector<TimelineRecord>& records = timeline_records();
    if (records.empty()) return "timeline_stop: CUPTI recorded no GPU activity";
    uint64_t t0 = records[0].start_ns;
    for (const TimelineRecord& r : records) t0 = std::min(t0, r.start_ns);
    FILE* fp = fopen(path, "w");
    if (!fp) return strfmt("timeline_stop: cannot write '%s'", path);
    fprintf(fp, "kind,name,start_us,end_us,stream\n");
    for (const TimelineRecord& r : records)
        fprintf(fp, "%s,%s,%.3f,%.3f,%u\n", r.kind, timeline_csv_field(r.name).c_str(), (r.start_ns - t0) / 1e3,
                (r.end_ns - t0) / 1e3, r.stream);
    fclose(fp);
    printf("timeline: %zu records (%zu dropped by CUPTI) written to %s\n", records.size(), dropped, path);
    return dropped ? strfmt("timeline_stop: CUPTI dropped %zu records; the timeline has holes", dropped) : "";
}
#else
inline std::string timeline_start() {
    return "--timeline needs CUPTI: this binary was built without cupti.h (the Makefile looks in the CUDA toolkit's "
           "include/ and extras/CUPTI/include/)";
}
inline std::string timeline_stop(const char*) { return "built without CUPTI"; }
#endif
