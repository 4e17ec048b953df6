// The remote-shard flags shared by train, data and bench data (commands.h).
#include "commands.h"

namespace hpct::cli {

void add_source_flags(CLI::App* c, SourceFlags* f) {
  c->add_option(
      "--ca-file", f->ca_file,
      "PEM file of the CAs that sign https:// and s3:// servers (default: the system store; "
      "HPCT_DATA_CA_FILE)");
  c->add_option("--cache-dir", f->cache_dir,
                "Keep whole remote shards here between epochs and runs, shared by the host's ranks "
                "(HPCT_DATA_CACHE_DIR)");
  c->add_option("--cache-size", f->cache_size,
                "Most bytes the shard cache holds, e.g. 50G; least recently used shards go first "
                "(HPCT_DATA_CACHE_SIZE)");
  c->add_option("--spool-memory", f->spool_memory,
                "Most bytes of remote shards held in memory while they stream, e.g. 4G; further "
                "shards spool to a temporary file (HPCT_DATA_SPOOL_MEMORY, default 1G)");
}

void apply_source_flags(const SourceFlags& f, Config* config) {
  if (!f.ca_file.empty()) config->set("HPCT_DATA_CA_FILE", f.ca_file, ConfigSource::kFlag);
  if (!f.cache_dir.empty()) config->set("HPCT_DATA_CACHE_DIR", f.cache_dir, ConfigSource::kFlag);
  if (!f.cache_size.empty()) config->set("HPCT_DATA_CACHE_SIZE", f.cache_size, ConfigSource::kFlag);
  if (!f.spool_memory.empty())
    config->set("HPCT_DATA_SPOOL_MEMORY", f.spool_memory, ConfigSource::kFlag);
}

}  // namespace hpct::cli
