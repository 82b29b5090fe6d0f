#!/usr/bin/env python3
"""Keep one GPU architecture's machine code in a CUDA shared library.

    scripts/prune-fatbin.py IN.so OUT.so SM        (SM: 90 for H100/H200)

Used by scripts/gpu-bundle.sh --cuda-ep to carry ONNX Runtime's CUDA provider
(284 MB, code for sm_75 … sm_120) to a GPU host under the 64 MiB a device call
may carry. The library keeps its ELF layout byte for byte except inside the
.nv_fatbin section: in each fatbin there, the entries for architecture SM are
moved to the front, the fatbin's size is set to theirs and the rest of its
space is zeroed, so the file compresses to a fraction. A fatbin with no entry
for SM is kept whole (nothing in it could run on that GPU anyway, and whatever
PTX it has stays). The result only runs on GPUs of that architecture.

Fatbin layout (little endian):
  header  u32 magic 0xBA55ED50, u16 version, u16 header size, u64 size of the entries
  entry   u16 kind (1 PTX, 2 ELF), u16, u32 header size, u64 payload size,
          u32, u32, u16 minor, u16 major, u32 architecture (sm_XY as XY), ...
"""
import struct
import sys

MAGIC = 0xBA55ED50


def sections(data):
    if data[:4] != b"\x7fELF" or data[4] != 2:
        sys.exit("not a 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = heads[shstrndx][4]
    for name, _type, _flags, _addr, off, size in heads:
        end = data.index(b"\0", names + name)
        yield data[names + name:end].decode(), off, size


def prune(data, want):
    fat = [(off, size) for name, off, size in sections(data) if name == ".nv_fatbin"]
    if not fat:
        sys.exit("no .nv_fatbin section: nothing to prune")
    o, end = fat[0][0], fat[0][0] + fat[0][1]
    kept = dropped = whole = fatbins = 0
    while o < end:
        magic, _ver, hsize, fsize = struct.unpack_from("<IHHQ", data, o)
        if magic != MAGIC:  # padding between fatbins
            o += 8
            continue
        fatbins += 1
        p, fend, entries = o + hsize, o + hsize + fsize, []
        while p < fend:
            _kind, _, ehsize, psize = struct.unpack_from("<HHIQ", data, p)
            arch, = struct.unpack_from("<I", data, p + 28)
            if ehsize == 0 or p + ehsize + psize > fend:
                sys.exit(f"fatbin at {o:#x}: entry at {p:#x} runs past its end; not a layout this script knows")
            entries.append((p, ehsize + psize, arch))
            p += ehsize + psize
        keep = [e for e in entries if e[2] == want]
        if keep:
            blob = b"".join(bytes(data[s:s + n]) for s, n, _ in keep)
            data[o + hsize:fend] = blob + bytes(fsize - len(blob))
            struct.pack_into("<Q", data, o + 8, len(blob))
            kept += len(keep)
            dropped += len(entries) - len(keep)
        else:
            whole += 1
        o = fend
    return fatbins, kept, dropped, whole


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src, dst, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
    data = bytearray(open(src, "rb").read())
    fatbins, kept, dropped, whole = prune(data, want)
    if kept == 0:
        sys.exit(f"{src}: no sm_{want} code at all")
    open(dst, "wb").write(data)
    print(f"{src}: {fatbins} fatbins; kept {kept} sm_{want} entries, dropped {dropped}; {whole} without sm_{want} kept whole")


if __name__ == "__main__":
    main()
