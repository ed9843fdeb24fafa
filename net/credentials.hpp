// The cluster's credentials file (what nodes and clients present) and the head's key store:
// created on the head's first start under <store>/cluster/, mode 0600, reused afterwards.
#pragma once

#include <filesystem>
#include <string>

#include "net/curve.hpp"

namespace cohort::net {

// <store>/cluster/credentials.json: JSON
//   {"format": "cohort-credentials/1", "server_public_key": Z85, "client_public_key": Z85,
//    "client_secret_key": Z85, "server_address": "host:port" (optional)}
struct cluster_credentials {
  std::string server_public_key;
  curve_keypair client;
  std::string server_address; // empty when the file names none
};

// Reads and checks a credentials file. Throws credentials_error naming the file and the field.
cluster_credentials load_credentials(const std::filesystem::path& file);

// The credentials a node or client presents: the file given by `flag` (--credentials), else
// $COHORT_CREDENTIALS. Throws credentials_error saying how to pass one when neither is set.
cluster_credentials load_credentials_from(const std::string& flag);

// The bearer token of the head's dashboard and metrics endpoint (cluster-head --dashboard-port): 64 hex digits,
// a keyed BLAKE2b hash of the client secret key, so whoever holds the credentials file can scrape
// and the token reveals nothing of the key. `submit metrics-token` prints it.
std::string metrics_token(const cluster_credentials& creds);

// Writes a credentials file with mode 0600, replacing any file there (write, fsync, rename).
void save_credentials(const std::filesystem::path& file, const cluster_credentials& creds);

// Everything the head needs to serve: its own keypair and the credentials it hands out.
struct cluster_secrets {
  curve_keypair server;
  cluster_credentials credentials;
  std::filesystem::path credentials_file; // <store>/cluster/credentials.json
  bool created = false;                   // true when this call generated the keys
};

std::filesystem::path credentials_file_in(const std::filesystem::path& store_dir);

// On first start creates the cluster's keys: <store>/cluster/server_key.json (the head's keypair)
// and <store>/cluster/credentials.json (client keypair + server public key), both mode 0600,
// created atomically so that heads starting together on one store agree. Later calls load and
// check them. Throws credentials_error when the files are unreadable or do not belong together.
cluster_secrets ensure_cluster_credentials(const std::filesystem::path& store_dir);

} // namespace cohort::net
