// Preprocessing kernels, compiled at run time by NVRTC (include-free).
//
// Each kernel has a line-for-line CPU twin in src/frame/convert.rs: the same
// float operations in the same order, so with --fmad=false the two agree to
// rounding. Keep them in step: a change here is a change there.

#define FMT_NV12 0
#define FMT_P010 1
#define FMT_YUV420P 2
#define FMT_RGB24 3
#define FMT_BGR24 4

__device__ __forceinline__ float clampf(float v, float lo, float hi) { return fminf(fmaxf(v, lo), hi); }

// f32 -> IEEE half bits, round to nearest even (no <cuda_fp16.h> needed).
__device__ unsigned short f32_to_f16(float f) {
    unsigned int x = __float_as_uint(f);
    unsigned int sign = (x >> 16) & 0x8000u;
    unsigned int mant = x & 0x007fffffu;
    int exp = (int)((x >> 23) & 0xffu);
    if (exp == 0xff) return (unsigned short)(sign | 0x7c00u | (mant ? 0x200u : 0u));
    int e = exp - 127 + 15;
    if (e >= 0x1f) return (unsigned short)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (unsigned short)sign;
        mant |= 0x00800000u;
        unsigned int shift = (unsigned int)(14 - e);
        unsigned int h = mant >> shift;
        unsigned int rem = mant & ((1u << shift) - 1u);
        unsigned int half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (h & 1u))) h++;
        return (unsigned short)(sign | h);
    }
    unsigned int h = ((unsigned int)e << 10) | (mant >> 13);
    unsigned int rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (unsigned short)(sign | h);
}

// One sample of plane `p` (8-bit, or 16-bit little-endian scaled to 0..255.996).
__device__ __forceinline__ float sample(const unsigned char* p, int pitch, int x, int y, int step, int wide) {
    const unsigned char* row = p + (long long)y * pitch;
    if (wide) return (float)((const unsigned short*)row)[x * step] * (1.0f / 256.0f);
    return (float)row[x * step];
}

// Bilinear read at (fx, fy) of a plane `w` x `h`; `step` elements between
// horizontal neighbours (2 for interleaved UV, 3 for packed RGB).
__device__ float bilinear(const unsigned char* p, int pitch, int w, int h, float fx, float fy, int step, int wide) {
    fx = clampf(fx, 0.0f, (float)(w - 1));
    fy = clampf(fy, 0.0f, (float)(h - 1));
    int x0 = (int)floorf(fx);
    int y0 = (int)floorf(fy);
    int x1 = min(x0 + 1, w - 1);
    int y1 = min(y0 + 1, h - 1);
    float wx = fx - (float)x0;
    float wy = fy - (float)y0;
    float a = sample(p, pitch, x0, y0, step, wide);
    float b = sample(p, pitch, x1, y0, step, wide);
    float c = sample(p, pitch, x0, y1, step, wide);
    float d = sample(p, pitch, x1, y1, step, wide);
    float top = (1.0f - wx) * a + wx * b;
    float bot = (1.0f - wx) * c + wx * d;
    return (1.0f - wy) * top + wy * bot;
}

// Decoded picture (NV12, P010, YUV420P, RGB24, BGR24) -> model tensor, in one
// pass: colour conversion (matrix, range), bilinear resize into the
// letterboxed (or stretched) area, normalisation, channel order, padding,
// NCHW or NHWC, f32 or f16. One thread per output pixel of one image;
// `out` points at that image's slot in the (batched) tensor.
extern "C" __global__ void preprocess(
    const unsigned char* p0, int pitch0,
    const unsigned char* p1, int pitch1,
    const unsigned char* p2, int pitch2,
    int format, int src_w, int src_h,
    float y_off, float y_mul, float c_mul,
    float k_rv, float k_gu, float k_gv, float k_bu,
    int new_w, int new_h, int pad_x, int pad_y, int dst_w, int dst_h,
    float sx, float sy,
    float mul0, float mul1, float mul2,
    float add0, float add1, float add2,
    float pad0, float pad1, float pad2,
    int bgr, int nhwc, int half_out,
    void* out)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= dst_w || y >= dst_h) return;

    float o0, o1, o2;
    int ix = x - pad_x;
    int iy = y - pad_y;
    if (ix < 0 || iy < 0 || ix >= new_w || iy >= new_h) {
        o0 = pad0; o1 = pad1; o2 = pad2;
    } else {
        float fx = ((float)ix + 0.5f) * sx - 0.5f;
        float fy = ((float)iy + 0.5f) * sy - 0.5f;
        float r, g, b;
        if (format == FMT_RGB24 || format == FMT_BGR24) {
            float c0 = bilinear(p0, pitch0, src_w, src_h, fx, fy, 3, 0);
            float c1 = bilinear(p0 + 1, pitch0, src_w, src_h, fx, fy, 3, 0);
            float c2 = bilinear(p0 + 2, pitch0, src_w, src_h, fx, fy, 3, 0);
            if (format == FMT_RGB24) { r = c0; g = c1; b = c2; } else { r = c2; g = c1; b = c0; }
        } else {
            int wide = format == FMT_P010;
            int cw = (src_w + 1) / 2;
            int ch = (src_h + 1) / 2;
            float cx = (fx + 0.5f) * 0.5f - 0.5f;
            float cy = (fy + 0.5f) * 0.5f - 0.5f;
            float yv = bilinear(p0, pitch0, src_w, src_h, fx, fy, 1, wide);
            float u, v;
            if (format == FMT_YUV420P) {
                u = bilinear(p1, pitch1, cw, ch, cx, cy, 1, 0);
                v = bilinear(p2, pitch2, cw, ch, cx, cy, 1, 0);
            } else {
                int bytes = wide ? 2 : 1;
                u = bilinear(p1, pitch1, cw, ch, cx, cy, 2, wide);
                v = bilinear(p1 + bytes, pitch1, cw, ch, cx, cy, 2, wide);
            }
            float yy = (yv - y_off) * y_mul;
            float cb = (u - 128.0f) * c_mul;
            float cr = (v - 128.0f) * c_mul;
            r = clampf(yy + k_rv * cr, 0.0f, 255.0f);
            g = clampf(yy - k_gu * cb - k_gv * cr, 0.0f, 255.0f);
            b = clampf(yy + k_bu * cb, 0.0f, 255.0f);
        }
        float a0 = bgr ? b : r;
        float a2 = bgr ? r : b;
        o0 = a0 * mul0 + add0;
        o1 = g * mul1 + add1;
        o2 = a2 * mul2 + add2;
    }

    long long plane = (long long)dst_w * dst_h;
    long long pix = (long long)y * dst_w + x;
    long long i0, i1, i2;
    if (nhwc) { i0 = pix * 3; i1 = i0 + 1; i2 = i0 + 2; }
    else { i0 = pix; i1 = plane + pix; i2 = 2 * plane + pix; }
    if (half_out) {
        unsigned short* o = (unsigned short*)out;
        o[i0] = f32_to_f16(o0); o[i1] = f32_to_f16(o1); o[i2] = f32_to_f16(o2);
    } else {
        float* o = (float*)out;
        o[i0] = o0; o[i1] = o1; o[i2] = o2;
    }
}

// Position-weighted sum of a plane's bytes: a cheap fingerprint of a frame
// on the device, for the stream-ordering check (compared with the same sum of
// the downloaded frame).
extern "C" __global__ void checksum_u8(const unsigned char* p, int pitch, int w, int h, unsigned long long* sum) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    atomicAdd(sum, (unsigned long long)p[(long long)y * pitch + x] * (unsigned long long)(x + 1 + y * 7));
}

// Results drawn on an NV12 picture in place (the CPU twin is
// `overlay::paint_nv12`, the same integer maths). One thread per luma pixel,
// which also paints the chroma sample of a 2x2 block from its top-left pixel.
// `prims`: n primitives of 10 ints, painted in order: x0 y0 x1 y1 (inclusive),
// a hole x0 y0 x1 y1 (pixels strictly inside are left alone), an offset into
// `alpha` (-1: solid; else a mask of (x1-x0+1) bytes per row), and the colour
// Y | U << 8 | V << 16.
__device__ __forceinline__ unsigned char blend_u8(unsigned int v, unsigned int c, unsigned int a) {
    return (unsigned char)((v * (255u - a) + c * a + 127u) / 255u);
}

extern "C" __global__ void overlay_nv12(unsigned char* luma, int y_pitch, unsigned char* chroma, int uv_pitch, int w, int h,
                                        const int* prims, int n, const unsigned char* alpha) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    bool has_chroma = ((x | y) & 1) == 0;
    unsigned char* py = luma + (long long)y * y_pitch + x;
    unsigned char* puv = chroma + (long long)(y >> 1) * uv_pitch + x;
    unsigned int vy = *py, vu = 0, vv = 0;
    if (has_chroma) { vu = puv[0]; vv = puv[1]; }
    bool touched = false;
    for (int i = 0; i < n; i++) {
        const int* p = prims + i * 10;
        if (x < p[0] || x > p[2] || y < p[1] || y > p[3]) continue;
        if (x > p[4] && x < p[6] && y > p[5] && y < p[7]) continue;
        unsigned int a = p[8] < 0 ? 255u : alpha[p[8] + (long long)(y - p[1]) * (p[2] - p[0] + 1) + (x - p[0])];
        unsigned int c = (unsigned int)p[9];
        vy = blend_u8(vy, c & 255u, a);
        if (has_chroma) {
            vu = blend_u8(vu, (c >> 8) & 255u, a);
            vv = blend_u8(vv, (c >> 16) & 255u, a);
        }
        touched = true;
    }
    if (!touched) return;
    *py = (unsigned char)vy;
    if (has_chroma) { puv[0] = (unsigned char)vu; puv[1] = (unsigned char)vv; }
}
