// src/distributed.h: ranks from flags and launcher environments, ZeRO-1 shards, and the NCCL id rendezvous (file and
// TCP) between forked processes, including the bounded failure when rank 0 never shows up.
#include <sys/wait.h>
#include <ctime>
#include <map>
#include <random>
#include "test.h"
#include "test_train_helpers.h"
#include "distributed.h"

static std::string ranks_from(RankInfo* r, int pn, int pr, std::map<std::string, std::string> env) {
    return resolve_ranks(r, pn, pr, [&](const char* n) { auto it = env.find(n); return it == env.end() ? (const char*)nullptr : it->second.c_str(); });
}

TEST(distributed_ranks_from_flags_and_environments) {
    RankInfo r;
    CHECK(ranks_from(&r, 0, 0, {}) == "" && r.world == 1 && r.rank == 0 && r.local_rank == 0);
    CHECK(ranks_from(&r, 4, 2, {}) == "" && r.world == 4 && r.rank == 2 && r.local_rank == 2);
    CHECK(ranks_from(&r, 0, 0, {{"WORLD_SIZE", "8"}, {"RANK", "5"}, {"LOCAL_RANK", "1"}}) == "" && r.world == 8 && r.rank == 5 && r.local_rank == 1);
    CHECK(ranks_from(&r, 0, 0, {{"SLURM_NTASKS", "2"}, {"SLURM_PROCID", "1"}, {"SLURM_LOCALID", "1"}}) == "" && r.world == 2 && r.rank == 1);
    CHECK(ranks_from(&r, 2, 1, {{"WORLD_SIZE", "8"}, {"RANK", "5"}}) == "" && r.world == 2 && r.rank == 1);   // flags win
    std::string err = ranks_from(&r, 0, 0, {{"WORLD_SIZE", "2"}});
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("RANK") != std::string::npos);
    CHECK(ranks_from(&r, 2, 2, {}).find("outside") != std::string::npos);
}

TEST(distributed_zero1_shards_cover_the_parameters_once) {
    for (size_t n : {(size_t)1, (size_t)7, (size_t)124475904, (size_t)124475905})
        for (int world : {1, 2, 3, 8}) {
            size_t next = 0;
            for (int r = 0; r < world; r++) {
                const Shard s = zero1_shard(n, world, r);
                CHECK(s.offset == std::min(n, next) && s.size <= s.shard_size && s.shard_size % 8 == 0);
                CHECK(s.shard_size * world >= n && s.shard_size * world < n + 8 * world);
                next = s.offset + s.shard_size;
                if (r < world - 1 && s.offset + s.shard_size <= n) CHECK(s.size == s.shard_size);
            }
            CHECK(zero1_shard(n, world, world - 1).offset + zero1_shard(n, world, world - 1).size == n);
        }
}

// runs rendezvous(rank, blob) in world - 1 forked children (ranks 1..) and here (rank 0); every rank must end with
// rank 0's blob. Returns the number of ranks that failed.
template <class Rendezvous>
static int rendezvous_processes(int world, Rendezvous rendezvous) {
    unsigned char blob[kRendezvousBytes];
    std::mt19937 rng((unsigned)time(nullptr));
    for (auto& b : blob) b = (unsigned char)rng();
    std::vector<pid_t> kids;
    for (int rank = 1; rank < world; rank++) {
        const pid_t pid = fork();
        if (pid == 0) {
            unsigned char got[kRendezvousBytes] = {};
            const std::string err = rendezvous(rank, got);
            _exit(err.empty() && memcmp(got, blob, kRendezvousBytes) == 0 ? 0 : 1);
        }
        kids.push_back(pid);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));   // the others are waiting before rank 0 shows up
    int failed = rendezvous(0, blob).empty() ? 0 : 1;
    for (pid_t pid : kids) {
        int status = 0;
        waitpid(pid, &status, 0);
        failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    return failed;
}

TEST(distributed_rendezvous_through_a_file) {
    const std::string dir = test_tmpdir();
    CHECK(rendezvous_processes(4, [&](int rank, unsigned char* blob) { return rendezvous_fs(dir, rank, blob, 10.0); }) == 0);
    rendezvous_fs_clear(dir);
    FILE* f = fopen(rendezvous_fs_path(dir).c_str(), "rb");
    CHECK(f == nullptr);
    if (f) fclose(f);
    test_rmdir(dir);
}

TEST(distributed_rendezvous_through_tcp) {
    const int port = 20000 + (int)(getpid() % 20000);
    CHECK(rendezvous_processes(3, [&](int rank, unsigned char* blob) { return rendezvous_tcp("127.0.0.1", port, rank, 3, blob, 10.0); }) == 0);
}

TEST(distributed_rendezvous_fails_in_bounded_time_without_rank_0) {
    const std::string dir = test_tmpdir();
    unsigned char blob[kRendezvousBytes];
    const auto t0 = std::chrono::steady_clock::now();
    std::string err = rendezvous_fs(dir, 1, blob, 0.5);
    printf("  message: %s\n", err.c_str());
    CHECK(!err.empty() && seconds_since(t0) < 3.0);
    err = rendezvous_tcp("127.0.0.1", 20000 + (int)(getpid() % 20000) + 1, 1, 2, blob, 0.5);
    printf("  message: %s\n", err.c_str());
    CHECK(!err.empty() && seconds_since(t0) < 5.0);
    std::string host; int port = 0;
    CHECK(parse_host_port("node7:29500", &host, &port) == "" && host == "node7" && port == 29500);
    CHECK(!parse_host_port("node7", &host, &port).empty() && !parse_host_port("h:99999", &host, &port).empty());
    test_rmdir(dir);
}
