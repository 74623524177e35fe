# bench/gpu/kit-env.sh — sourced (POSIX sh) with KIT set to an unpacked
# kfac GPU kit (tools/gpu-kit.sh): finds the CUDA libraries the kit's
# programs need on this machine and sets LD_LIBRARY_PATH so that the kit's
# own libraries come first, CUDA's next and the kit's C++ runtime last.
#
# Where it looks, in order, for libcudart.so.13, libcublas.so.13,
# libcublasLt.so.13 and libcudnn.so.9 (cuDNN 9 loads its sub-libraries,
# libcudnn_*.so.9, from the same folder):
#   $KFAC_CUDA_LIBS (folders, ':'-separated), $CUDA_HOME/lib64,
#   /usr/local/cuda/lib64, /usr/local/cuda/targets/x86_64-linux/lib,
#   the nvidia-* packages of python3 (PyTorch's cuDNN and cuBLAS),
#   /usr/lib/x86_64-linux-gnu, and at last a bounded search of /usr and /opt.
# Sets KIT_LIBS_FOUND ("name=folder" lines) and KIT_LIBS_MISSING (names);
# returns 1 when one is missing, after saying which.

kit_find_lib() { # NAME: print the first folder holding NAME
  _n=$1
  _oldifs=$IFS; IFS=:
  for _d in ${KFAC_CUDA_LIBS:-} ${CUDA_HOME:+$CUDA_HOME/lib64} /usr/local/cuda/lib64 \
            /usr/local/cuda/targets/x86_64-linux/lib $KIT_PY_NVIDIA /usr/lib/x86_64-linux-gnu; do
    [ -n "$_d" ] && [ -e "$_d/$_n" ] && { IFS=$_oldifs; echo "$_d"; return 0; }
  done
  IFS=$_oldifs
  _f=$(timeout 60 find /usr /opt -xdev -name "$_n" -print -quit 2>/dev/null) || true
  [ -n "$_f" ] && { dirname "$_f"; return 0; }
  return 1
}

: "${KIT:?KIT must name the unpacked kit}"
# The python3 nvidia-* packages' library folders (nvidia/<pkg>/lib, nvidia/cu13/lib, ...).
KIT_PY_NVIDIA=$(python3 - <<'EOF' 2>/dev/null | tr '\n' ':'
import glob, os
try:
    import nvidia
    roots = list(nvidia.__path__)
except Exception:
    roots = []
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "*", "lib")) + glob.glob(os.path.join(r, "*", "*", "lib"))):
        print(d)
EOF
)
KIT_LIBS_FOUND=""
KIT_LIBS_MISSING=""
_cudadirs=""
for _lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnvrtc.so.13; do
  if _dir=$(kit_find_lib "$_lib"); then
    KIT_LIBS_FOUND="$KIT_LIBS_FOUND$_lib=$_dir
"
    case ":$_cudadirs:" in *":$_dir:"*) ;; *) _cudadirs="${_cudadirs:+$_cudadirs:}$_dir" ;; esac
  elif [ "$_lib" != libnvrtc.so.13 ]; then # nvrtc: only cuDNN's run-time fusion engines use it
    KIT_LIBS_MISSING="$KIT_LIBS_MISSING $_lib"
  fi
done
LD_LIBRARY_PATH="$KIT/lib${_cudadirs:+:$_cudadirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:$KIT/lib/fallback"
export LD_LIBRARY_PATH
export KFAC_BIN="$KIT/bin"
if [ -n "$KIT_LIBS_MISSING" ]; then
  echo "kit-env: not found on this machine:$KIT_LIBS_MISSING (set KFAC_CUDA_LIBS to the folders holding them)" >&2
  return 1
fi
return 0
