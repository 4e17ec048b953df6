// Writing an S3 object as a multipart upload (ShardFileSystem::open_write,
// remote_fs.h): a part is sent as each fills, commit completes the upload,
// and a writer dropped uncommitted aborts it, so no object appears.
#pragma once

#include <memory>
#include <string>

#include "data/source/file.h"
#include "data/source/http.h"

namespace hpct::data {

// Starts the upload of `url` (Io when the server starts none); base is the
// object's signed request, c counts the bytes sent and the requests.
std::unique_ptr<WritableFile> open_s3_upload(std::string url, HttpRequest base, HttpOptions http,
                                             SourceCounters* c);

}  // namespace hpct::data
