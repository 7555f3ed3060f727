# gpu-unpack.sh, sourced (. scripts/gpu-unpack.sh) by the device scripts: on the GPU machine,
# unpacks build/gpubin.tar.xz when it was carried (gpubin/ packed here to fit the carry) and the
# Debian packages of .devdeps (scripts/gpu-prepare.sh), sets LD_LIBRARY_PATH and the defaults of
# OUT and ENVS, and prints the commit the binaries were built at.
[ -f build/gpubin.tar.xz ] && xz -dc build/gpubin.tar.xz | tar xf -
mkdir -p /tmp/dd && for f in .devdeps/*.deb; do dpkg -x "$f" /tmp/dd; done
export LD_LIBRARY_PATH=/tmp/dd/usr/lib/x86_64-linux-gnu
OUT=${OUT:-/tmp}
ENVS=${ENVS:--}
cat gpubin/COMMIT
