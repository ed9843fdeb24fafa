# Sourced by the GPU scripts (gpu-bench, gpu-speed, gpu-checks) from the repository root, with
# $deps the staged Debian dependencies (.device-deps, made by scripts/gpu-stage-deps) and
# steps=(...) the steps asked for. Turns NVLink multicast off (it can take the host's shared GPUs
# out of service), unpacks the staged archive once, and sets cohort_ld: the library path for
# cohort's own programs, the staged libraries and the NCCL that pip's torch loads first (Python
# keeps the image's own); has_step NAME tells whether NAME was asked for.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [[ -f $deps/deps.tar.gz && ! -f $deps/.unpacked ]]; then
  tar -C "$deps" -xzf "$deps/deps.tar.gz" && touch "$deps/.unpacked"
fi
nccl=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)
cohort_ld=$deps/lib${nccl:+:$nccl/lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
has_step() { local s; for s in "${steps[@]}"; do [[ $s == "$1" ]] && return 0; done; return 1; }
