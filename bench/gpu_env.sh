# Sourced by the bench/gpu_*.sh scripts on the lent GPU machine: installs the wheels carried in .whl/ (the
# packages the machine's image lacks; device README) into /tmp/site, sets PYTHONPATH to them and this checkout,
# keeps NVLink multicast off (the machine's rule) and prints the GPU. Exits the caller if the install fails.
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD || exit 1
else  # wheels installed by the caller (a snapshot run from a subfolder): keep them first
  export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
fi
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1
