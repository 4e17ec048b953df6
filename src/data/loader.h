// hpct::data::Loader: the input pipeline a training loop pulls batches from.
//
//   shards (local tar or TFRecord files, or a data server at tcp://host:port)
//     -> this rank's samples for the epoch (sampler.h: split by rank over a
//        (seed, epoch) permutation, shuffle buffer)
//     -> N decode threads, each building whole batches (batch b goes to
//        whichever thread is free; its content depends only on b)
//     -> a bounded window of `prefetch` batches -> next()
//
// Batches are images [B, C, H, W] (uint8, or float32 normalized with
// mean/std when normalize is on) and labels [B] int64, plus the sample keys.
// All ranks get the same number of batches (padding or drop_last, see
// sampler.h). Output is deterministic for (seed, epoch, rank, size):
// augmentation draws from a generator seeded by the sample, not the thread.
//
// Errors: with on_error fail, the first damaged sample raises DataCorrupt
// from next() (shard, member, byte offset) when its batch is reached; with
// skip it is left out of its batch (which is then short) and counted in
// stats(), which the loader also logs at the end of each epoch. Damage that
// ends a shard (a tar header, a TFRecord length CRC, a file cut short) is
// found when the shards are indexed, in the constructor: DataCorrupt with
// fail, and with skip the shard keeps the samples before it (counted in
// stats().index_skipped).
//
// TFRecord files (.tfrecord, .tfrecords, .tfr) are indexed one sample per
// record and split, shuffled and resumed exactly as tar samples; each record
// is a tf.train.Example with an encoded image and an int64 label (fields.h).
//
// Exact resume: save_state() after k batches and restore_state() in a fresh
// Loader with the same options: the remaining batches are the same, in the
// same order. The state is a few hundred bytes (loader_state.h).
//
// GPUs: with pin_memory and device set, batches come out on the device,
// copied from pinned memory one batch ahead (LoaderOptions::device).
//
// Threads: the Loader owns its decode threads (and, for a data server, one
// receiving thread). Its methods are for one consumer thread; they are not
// thread-safe against each other. Memory stays bounded: at most prefetch
// batches (decoded or raw) exist at once.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/config.h"
#include "core/log.h"
#include "data/decode/augment.h"
#include "data/source/file.h"
#include "data/sample.h"

namespace hpct::data {

struct LoaderOptions {
  // Shard paths or patterns ("train-{000000..000009}.tar", "@list.txt";
  // tar and TFRecord files may be mixed), or one "tcp://host:port" naming a
  // data server.
  std::vector<std::string> shards;
  std::string secret;  // the job secret, for a data server

  int rank = 0;
  int size = 1;
  std::uint64_t seed = 0;
  std::int64_t batch_size = 64;
  bool drop_last = false;
  bool shuffle = true;
  size_t shuffle_buffer = 1000;
  size_t shuffle_initial = 100;

  int threads = 2;             // decode threads
  // Decode threads run at idle priority (SCHED_IDLE): they take a core only
  // when no compute thread wants it. With as many ranks as cores, a decode
  // thread at normal priority preempts a rank's compute for a few ms at a
  // time and its peers wait for it at the next allreduce; at idle priority
  // it runs in those waits instead (HPCT_DATA_IDLE_PRIORITY).
  bool idle_priority = true;
  int prefetch = 4;            // batches in flight (decoded or being decoded)
  OnError on_error = OnError::kFail;
  Millis timeout{300000};      // how long next() waits for a batch

  // Which fields hold the image and the label: the first present wins.
  std::vector<std::string> image_fields = {"png", "jpg", "jpeg"};
  std::vector<std::string> label_fields = {"cls", "txt", "json"};
  // For TFRecord shards: which tf.train.Example features hold the encoded
  // image (bytes) and the label (int64); the first present wins.
  std::vector<std::string> example_image_features = {"image/encoded", "image"};
  std::vector<std::string> example_label_features = {"image/class/label", "label"};
  int channels = 0;            // 0: as decoded; 1 or 3 to convert
  AugmentOptions augment;
  bool normalize = false;      // float32 (x/255 - mean) / std instead of uint8
  std::vector<float> mean = {0.5f};  // one value, or one per channel
  std::vector<float> std = {0.5f};

  // Data server client: reconnect attempts after the server goes away
  // (each retried with backoff up to connect_timeout in total).
  int max_reconnects = 10;
  Millis connect_timeout{30000};

  std::shared_ptr<FileSystem> fs = default_file_system();  // local paths and URLs
  Logger logger;

  // GPUs: decode threads build batches in pinned (page-locked) host memory,
  // so a copy to the GPU runs asynchronously. Needs torch's CUDA library in
  // the process (train/device.h, use_device).
  bool pin_memory = false;
  // Where next() hands batches out: the CPU, or a GPU. For a GPU each batch
  // is copied with non_blocking on the current stream, and when next()
  // returns, the copy of the next batch already decoded has been issued
  // too (ahead, while the caller computes on this one). Copying ahead does
  // not count as delivered: save_state() stays exact.
  c10::Device device = c10::Device(c10::kCPU);
};

struct Batch {
  at::Tensor images;  // [B, C, H, W]
  at::Tensor labels;  // [B] int64
  std::vector<std::string> keys;
  std::int64_t epoch = 0;
  std::int64_t index = 0;  // batch number within the epoch
  // The largest label, found on the host while decoding (-1: no samples),
  // so a check of the labels costs no device sync.
  std::int64_t max_label = -1;
};

struct LoaderStats {
  std::int64_t epoch = 0;
  std::uint64_t samples = 0;          // delivered this epoch (padding included)
  std::uint64_t padded = 0;           // of this rank's epoch, repeats that even out the ranks
  std::uint64_t skipped = 0;          // damaged samples left out this epoch
  std::uint64_t index_skipped = 0;    // samples lost to damaged shards when indexing
  std::uint64_t reconnects = 0;       // data server reconnects, all epochs
  std::vector<std::string> errors;    // the first few skip reasons (indexing's first)
};

// The tunables a job sets through HPCT_* variables or --set (core/config.h):
// prefetch, shuffle buffer, on-error policy, reconnects to a data server and
// decode-thread priority. The decode thread count is the caller's (the train
// and bench commands take --data-threads). InvalidArgument on a bad value.
void apply_config(const Config& config, LoaderOptions* o);

class Loader {
 public:
  // Expands the shard list and indexes the shards (or connects to the data
  // server). InvalidArgument for bad options; DataCorrupt for damaged
  // shards with on_error fail. Starts at epoch 0; call start_epoch to
  // choose another.
  explicit Loader(LoaderOptions options);
  ~Loader();  // stops and joins the threads (bounded: they watch a stop flag)
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Positions at the start of epoch (discarding any batches in flight).
  void start_epoch(std::int64_t epoch);
  // Elastic jobs: positions in epoch after the whole job consumed `consumed`
  // samples of it, as rank `rank` of a world of `size`, splitting by global
  // batch (sampler.h, plan_epoch_elastic); the options' rank and size are
  // replaced. Local shards only (InvalidArgument for a data server).
  void start_elastic_epoch(std::int64_t epoch, std::uint64_t consumed, int rank, int size);
  // The next batch of the current epoch, or false at its end. Blocks up to
  // options.timeout (then Timeout naming the batch).
  bool next(Batch* batch);

  // The first sample this rank reads next, decoded as next() would give it
  // (a batch of one), without taking it; a remote file system fetches its
  // bytes, not its shard's. With on_error skip a damaged sample is passed
  // over (at most 64). False when the rest of the epoch is empty, or for a
  // data server (only its stream knows the order).
  bool peek(Batch* batch);
  // Has a remote file system start downloading what this rank reads in the
  // rest of the epoch (next() does it too, on its first call): the shards in
  // reading order, and of each only the bytes this rank reads. A no-op for
  // local shards and a data server.
  void prefetch();

  std::int64_t epoch() const;
  std::int64_t batches_per_epoch() const;
  std::uint64_t samples_per_epoch() const;  // this rank's, padding included
  LoaderStats stats() const;

  // The position after the batches next() has returned (not those merely
  // prefetched), as bytes to keep in a checkpoint.
  std::string save_state() const;
  // Continues from a saved position. Mismatch naming the field when the
  // state was saved with other data, rank, size, seed or batch options;
  // DataCorrupt when the bytes are not a loader state.
  void restore_state(const std::string& bytes);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace hpct::data
