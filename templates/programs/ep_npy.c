#include "ep_npy.h"

#include <stdlib.h>
#include <string.h>

static const struct {
  const char* descr;
  const char* name;
  size_t size;
} kTypes[] = {
    {"<f4", "float32", 4}, {"<f8", "float64", 8}, {"<i8", "int64", 8}, {"<i4", "int32", 4},
    {"<i2", "int16", 2},   {"|i1", "int8", 1},    {"|u1", "uint8", 1}, {"|b1", "bool", 1},
    {"<u2", "uint16", 2},  {"<u4", "uint32", 4},  {"<u8", "uint64", 8}, {"<f2", "float16", 2},
};

static const char* find_value(const char* header, const char* key) {
  const char* p = strstr(header, key);
  if (!p) return NULL;
  p = strchr(p + strlen(key), ':');
  if (!p) return NULL;
  ++p;
  while (*p == ' ') ++p;
  return p;
}

const char* ep_npy_read_header(FILE* f, ep_npy_info_t* info) {
  unsigned char magic[8];
  if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "\x93NUMPY", 6) != 0) return "not a .npy file";
  uint32_t hlen = 0;
  if (magic[6] == 1) {
    unsigned char b[2];
    if (fread(b, 1, 2, f) != 2) return "truncated .npy header";
    hlen = (uint32_t)b[0] | ((uint32_t)b[1] << 8);
  } else {
    unsigned char b[4];
    if (fread(b, 1, 4, f) != 4) return "truncated .npy header";
    hlen = (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
  }
  char header[4096];
  if (hlen >= sizeof header || fread(header, 1, hlen, f) != hlen) return "truncated or oversized .npy header";
  header[hlen] = '\0';
  const char* d = find_value(header, "'descr'");
  if (!d || *d != '\'') return "no dtype in .npy header";
  ++d;
  info->dtype[0] = '\0';
  size_t itemsize = 0;
  for (size_t i = 0; i < sizeof kTypes / sizeof kTypes[0]; ++i) {
    size_t n = strlen(kTypes[i].descr);
    if (strncmp(d, kTypes[i].descr, n) == 0 && d[n] == '\'') {
      strcpy(info->dtype, kTypes[i].name);
      itemsize = kTypes[i].size;
    }
  }
  if (!itemsize) return "unsupported dtype in .npy file (not little-endian numeric)";
  const char* fo = find_value(header, "'fortran_order'");
  if (!fo || strncmp(fo, "False", 5) != 0) return "Fortran-ordered .npy files are not supported; save with np.ascontiguousarray";
  const char* s = find_value(header, "'shape'");
  if (!s || *s != '(') return "no shape in .npy header";
  ++s;
  info->rank = 0;
  size_t count = 1;
  while (*s && *s != ')') {
    while (*s == ' ' || *s == ',') ++s;
    if (*s == ')') break;
    char* end;
    long long v = strtoll(s, &end, 10);
    if (end == s || v < 0) return "bad shape in .npy header";
    if (info->rank == EP_NPY_MAX_RANK) return "too many dimensions in .npy file";
    info->shape[info->rank++] = v;
    count *= (size_t)v;
    s = end;
  }
  info->bytes = count * itemsize;
  return NULL;
}

int ep_npy_write(const char* path, const char* dtype, const int64_t* shape, int rank, const void* data, size_t bytes) {
  const char* descr = NULL;
  for (size_t i = 0; i < sizeof kTypes / sizeof kTypes[0]; ++i)
    if (strcmp(kTypes[i].name, dtype) == 0) descr = kTypes[i].descr;
  if (!descr) return -1;
  char dims[256] = "";
  size_t n = 0;
  for (int i = 0; i < rank; ++i)
    n += (size_t)snprintf(dims + n, sizeof dims - n, "%lld%s", (long long)shape[i], rank == 1 ? "," : (i + 1 < rank ? ", " : ""));
  char header[512];
  int h = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, dims);
  int total = 10 + h + 1;
  int pad = (64 - total % 64) % 64;
  FILE* f = fopen(path, "wb");
  if (!f) return -1;
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
  uint16_t hl = (uint16_t)(h + pad + 1);
  pre[8] = (unsigned char)(hl & 0xff);
  pre[9] = (unsigned char)(hl >> 8);
  int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(header, 1, (size_t)h, f) == (size_t)h;
  for (int i = 0; i < pad && ok; ++i) ok = fputc(' ', f) != EOF;
  ok = ok && fputc('\n', f) != EOF && fwrite(data, 1, bytes, f) == bytes;
  return (fclose(f) == 0 && ok) ? 0 : -1;
}
