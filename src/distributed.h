/*
Multi-GPU data parallelism: one process per GPU, the launch arithmetic and the NCCL id rendezvous (host code, no CUDA).

  ranks       -pn N -pr R, or torchrun's / Slurm's environment (WORLD_SIZE and RANK, LOCAL_RANK; SLURM_NTASKS,
              SLURM_PROCID, SLURM_LOCALID), which takes precedence where -pn is not given; the local rank picks the GPU
  rendezvous  rank 0 makes the NCCL unique id (128 bytes) and hands it to the others:
                fs   (-pi fs -pf DIR): a file DIR/flashgpt_nccl_id written atomically (temporary file + rename), which
                     the other ranks poll for; rank 0 removes it when it starts and again once every rank has joined,
                     so a later run does not find this run's id
                tcp  (-pi tcp -ps HOST:PORT, or MASTER_ADDR / MASTER_PORT): rank 0 listens, the others connect and read
              both wait at most timeout_s seconds and then fail with a message naming the missing step: no hang
  ZeRO-1      each rank owns a contiguous shard of the parameters (zero1_shard): its slice of the fp32 master weights and
              AdamW moments; the shards are equal, the last padded, so a reduce-scatter / all-gather needs no sizes

tests/test_train_distributed.cpp runs the arithmetic and both rendezvous between forked processes.
*/
#pragma once
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include "utils.h"

// ----------------------------------------------------------------------------
// ranks

struct RankInfo { int world, rank, local_rank; };

// flags first where given (-pn > 0), else the launcher's environment, else a single process. getenv_fn lets the tests
// pass an environment of their own.
template <class Getenv>
inline std::string resolve_ranks(RankInfo* r, int flag_world, int flag_rank, Getenv getenv_fn) {
    auto env_int = [&](const char* name, int* out) {
        const char* v = getenv_fn(name);
        if (!v || !*v) return false;
        char* end = nullptr;
        const long x = strtol(v, &end, 10);
        if (*end) return false;
        *out = (int)x;
        return true;
    };
    *r = {1, 0, 0};
    if (flag_world > 0) {
        r->world = flag_world; r->rank = flag_rank;
        if (!env_int("LOCAL_RANK", &r->local_rank) && !env_int("SLURM_LOCALID", &r->local_rank)) r->local_rank = flag_rank;
    } else if (env_int("WORLD_SIZE", &r->world)) {
        if (!env_int("RANK", &r->rank)) return "WORLD_SIZE is set but RANK is not (torchrun sets both)";
        if (!env_int("LOCAL_RANK", &r->local_rank)) r->local_rank = r->rank;
    } else if (env_int("SLURM_NTASKS", &r->world)) {
        if (!env_int("SLURM_PROCID", &r->rank)) return "SLURM_NTASKS is set but SLURM_PROCID is not";
        if (!env_int("SLURM_LOCALID", &r->local_rank)) r->local_rank = r->rank;
    }
    if (r->world < 1) return strfmt("the number of processes must be at least 1 (got %d)", r->world);
    if (r->rank < 0 || r->rank >= r->world) return strfmt("rank %d is outside 0..%d", r->rank, r->world - 1);
    if (r->local_rank < 0) return strfmt("local rank %d is negative", r->local_rank);
    return "";
}
inline std::string resolve_ranks(RankInfo* r, int flag_world, int flag_rank) {
    return resolve_ranks(r, flag_world, flag_rank, [](const char* n) { return (const char*)getenv(n); });
}

// ----------------------------------------------------------------------------
// ZeRO-1 shards: num_params split into world equal shards of shard_size (a multiple of 8 elements, 16-byte aligned
// for bf16); rank r owns [offset, offset + size), size < shard_size only on the last ranks (padding)

struct Shard { size_t offset, size, shard_size; };
inline Shard zero1_shard(size_t num_params, int world, int rank) {
    const size_t per = (num_params + world - 1) / world, shard_size = (per + 7) / 8 * 8;
    const size_t offset = std::min(num_params, (size_t)rank * shard_size);
    return {offset, std::min(num_params, offset + shard_size) - offset, shard_size};
}

// ----------------------------------------------------------------------------
// rendezvous of a small blob (the NCCL unique id) from rank 0 to the others

constexpr int kRendezvousBytes = 128;   // sizeof(ncclUniqueId)

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline std::string rendezvous_fs_path(const std::string& dir) { return dir + "/flashgpt_nccl_id"; }
inline void rendezvous_fs_clear(const std::string& dir) { remove(rendezvous_fs_path(dir).c_str()); }

// fs: rank 0 writes DIR/flashgpt_nccl_id atomically; the others wait for it
inline std::string rendezvous_fs(const std::string& dir, int rank, unsigned char* blob, double timeout_s) {
    const std::string path = rendezvous_fs_path(dir);
    if (rank == 0) {
        const std::string tmp = path + ".tmp." + std::to_string(getpid());
        FILE* f = fopen(tmp.c_str(), "wb");
        if (!f) return strfmt("rendezvous: cannot write '%s' (does -pf %s exist and is it shared by every rank?)", tmp.c_str(), dir.c_str());
        const bool ok = fwrite(blob, 1, kRendezvousBytes, f) == (size_t)kRendezvousBytes;
        if (fclose(f) != 0 || !ok || rename(tmp.c_str(), path.c_str()) != 0) { remove(tmp.c_str()); return strfmt("rendezvous: writing '%s' failed", path.c_str()); }
        return "";
    }
    const auto t0 = std::chrono::steady_clock::now();
    while (seconds_since(t0) < timeout_s) {
        FILE* f = fopen(path.c_str(), "rb");
        if (f) {
            const size_t n = fread(blob, 1, kRendezvousBytes, f);
            fclose(f);
            if (n == (size_t)kRendezvousBytes) return "";
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return strfmt("rendezvous: rank %d found no id from rank 0 in '%s' within %.1f s (is rank 0 running, with the same -pf?)",
                  rank, path.c_str(), timeout_s);
}

// tcp: rank 0 listens on port and sends the blob to each of the world - 1 others; they connect (retrying) and read it
inline std::string rendezvous_tcp(const std::string& host, int port, int rank, int world, unsigned char* blob, double timeout_s) {
    const auto t0 = std::chrono::steady_clock::now();
    if (rank == 0) {
        const int srv = socket(AF_INET, SOCK_STREAM, 0);
        if (srv < 0) return "rendezvous: socket() failed";
        const int one = 1;
        setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in addr{};
        addr.sin_family = AF_INET; addr.sin_addr.s_addr = htonl(INADDR_ANY); addr.sin_port = htons((uint16_t)port);
        if (bind(srv, (sockaddr*)&addr, sizeof addr) != 0 || listen(srv, world) != 0) {
            close(srv);
            return strfmt("rendezvous: rank 0 cannot listen on port %d (in use?)", port);
        }
        for (int served = 0; served < world - 1;) {
            const double left = timeout_s - seconds_since(t0);
            if (left <= 0) { close(srv); return strfmt("rendezvous: rank 0 heard from %d of %d ranks within %.1f s", served + 1, world, timeout_s); }
            fd_set fds; FD_ZERO(&fds); FD_SET(srv, &fds);
            timeval tv{(time_t)left, (suseconds_t)((left - (time_t)left) * 1e6)};
            if (select(srv + 1, &fds, nullptr, nullptr, &tv) <= 0) continue;
            const int c = accept(srv, nullptr, nullptr);
            if (c < 0) continue;
            const bool ok = send(c, blob, kRendezvousBytes, MSG_NOSIGNAL) == kRendezvousBytes;
            close(c);
            served += ok;
        }
        close(srv);
        return "";
    }
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET; hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res)
        return strfmt("rendezvous: cannot resolve '%s'", host.c_str());
    std::string err = strfmt("rendezvous: rank %d could not reach rank 0 at %s:%d within %.1f s", rank, host.c_str(), port, timeout_s);
    while (seconds_since(t0) < timeout_s) {
        const int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s >= 0 && connect(s, res->ai_addr, res->ai_addrlen) == 0) {
            int got = 0;
            while (got < kRendezvousBytes) {
                const ssize_t n = recv(s, blob + got, kRendezvousBytes - got, 0);
                if (n <= 0) break;
                got += (int)n;
            }
            close(s);
            if (got == kRendezvousBytes) { err = ""; break; }
        } else if (s >= 0) {
            close(s);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    freeaddrinfo(res);
    return err;
}

// "HOST:PORT" -> host, port
inline std::string parse_host_port(const std::string& s, std::string* host, int* port) {
    const size_t colon = s.rfind(':');
    if (colon == std::string::npos || colon == 0) return strfmt("'%s': want HOST:PORT", s.c_str());
    *host = s.substr(0, colon);
    char* end = nullptr;
    const long p = strtol(s.c_str() + colon + 1, &end, 10);
    if (*end || p <= 0 || p > 65535) return strfmt("'%s': the port must be 1..65535", s.c_str());
    *port = (int)p;
    return "";
}
