/* checkpoints/h5.c - checked HDF5 reads and writes (see h5.h). */
#include "checkpoints/h5.h"

#include <string.h>


#include "engine/core/status.h"

#define CHUNK_ELEMS ((int64_t)1 << 18) /* 1 MiB of float32 per chunk */

/* No H5_term_library at exit. When a write fails (a full disk), H5Fclose fails with its file half
 * torn down and its id still registered; HDF5 1.10's exit handler then closes that id again and
 * crashes in H5F__close_cb (reproduced: ckpt merge onto a full tmpfs). Trident closes every file it
 * writes itself, so the handler has nothing to flush; H5dont_atexit must come before the library's
 * first initialisation, hence a constructor. */
__attribute__((constructor)) static void no_exit_handler(void)
{
    H5dont_atexit();
}

void tri_h5_quiet(void)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

/* H5Ewalk2 callback: the operating system's message that HDF5's file drivers put in an error's
 * description ("..., errno = 28, error message = 'No space left on device', ..."), the innermost. */
static herr_t find_os_message(unsigned n, const H5E_error2_t *e, void *out)
{
    (void)n;
    const char *key = "error message = '";
    const char *at = e->desc ? strstr(e->desc, key) : NULL;
    if (at) {
        at += strlen(key);
        const char *end = strchr(at, '\'');
        snprintf(out, 128, "%.*s", (int)(end ? end - at : (long)strlen(at)), at);
    }
    return 0;
}

/* ": <cause>" from the HDF5 error stack of the failed call (e.g. ": No space left on device"), or ""
 * when HDF5 recorded no operating-system error. cause holds 128 bytes. */
static const char *os_cause(char *cause)
{
    char msg[128] = "";
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, find_os_message, msg);
    if (!msg[0])
        return "";
    snprintf(cause, 128, ": %.120s", msg);
    return cause;
}

/* HDF5 hands a freed block back to malloc when its free list holds more than the list's limit (64 KiB
 * by default), and so frees the metadata cache every open file gets (a calloc'd block over 1 MiB) at
 * every close: each file opened or created after it maps and faults in fresh pages (glibc's default
 * set-up maps blocks above 128 KiB afresh, AddressSanitizer every large block). Unlimited lists keep
 * the blocks of the files a process has had open at once, for the next ones. */
static void keep_free_blocks(void)
{
    H5set_free_list_limits(-1, -1, -1, -1, -1, -1);
}

int tri_h5_create(const char *path, hid_t *file)
{
    tri_h5_quiet();
    keep_free_blocks();
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0 || H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST) < 0) {
        H5Pclose(fapl);
        return TRI_ERR(TRI_EIO, "%s: cannot set up HDF5 file access", path);
    }
    *file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    char cause[128] = "";
    if (*file < 0)
        os_cause(cause); /* before the next call clears HDF5's error stack */
    H5Pclose(fapl);
    if (*file < 0)
        return TRI_ERR(TRI_EIO, "cannot create HDF5 file %s%s", path, cause);
    return TRI_OK;
}

int tri_h5_open(const char *path, hid_t *file)
{
    tri_h5_quiet();
    keep_free_blocks();
    *file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (*file < 0)
        return TRI_ERR(TRI_ECORRUPT, "%s: libhdf5 cannot open it as an HDF5 file", path);
    return TRI_OK;
}

int tri_h5_close(hid_t file, const char *path)
{
    if (file < 0)
        return TRI_OK;
    char cause[128];
    if (H5Fclose(file) < 0)
        return TRI_ERR(TRI_EIO, "%s: closing the HDF5 file failed (writing its last data)%s", path, os_cause(cause));
    return TRI_OK;
}

/* Chunk dimensions: the shape, cut along leading dimensions to at most CHUNK_ELEMS elements. */
static void chunk_dims(int ndim, const int64_t *shape, hsize_t *chunk)
{
    int64_t inner = 1;
    for (int d = 0; d < ndim; d++)
        chunk[d] = (hsize_t)shape[d];
    for (int d = 0; d < ndim; d++) {
        inner = 1;
        for (int e = d + 1; e < ndim; e++)
            inner *= (int64_t)chunk[e];
        int64_t rows = CHUNK_ELEMS / inner;
        if (rows >= (int64_t)chunk[d])
            break;
        chunk[d] = (hsize_t)(rows > 0 ? rows : 1);
        if (rows > 0)
            break;
    }
}

int tri_h5_write_f32(hid_t file, const char *path, const char *name, int ndim, const int64_t *shape,
                     const float *data, hid_t *dset)
{
    hsize_t dims[H5S_MAX_RANK], chunk[H5S_MAX_RANK];
    for (int d = 0; d < ndim; d++)
        dims[d] = (hsize_t)shape[d];
    chunk_dims(ndim, shape, chunk);
    hid_t space = H5Screate_simple(ndim, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    hid_t ds = -1;
    int rc = TRI_OK;
    char cause[128];
    if (space < 0 || dcpl < 0 || lcpl < 0 || H5Pset_chunk(dcpl, ndim, chunk) < 0 || H5Pset_fletcher32(dcpl) < 0 ||
        H5Pset_create_intermediate_group(lcpl, 1) < 0)
        rc = TRI_ERR(TRI_EIO, "%s: cannot set up dataset %s", path, name);
    if (!rc) {
        ds = H5Dcreate2(file, name, H5T_IEEE_F32LE, space, lcpl, dcpl, H5P_DEFAULT);
        if (ds < 0)
            rc = TRI_ERR(TRI_EIO, "%s: cannot create dataset %s%s", path, name, os_cause(cause));
    }
    if (!rc && H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
        rc = TRI_ERR(TRI_EIO, "%s: cannot write dataset %s%s", path, name, os_cause(cause));
    H5Pclose(lcpl);
    H5Pclose(dcpl);
    H5Sclose(space);
    if (rc || !dset) {
        if (ds >= 0)
            H5Dclose(ds);
    } else {
        *dset = ds;
    }
    return rc;
}

int tri_h5_attr_i64(hid_t obj, const char *path, const char *obj_name, const char *attr, int n, const int64_t *v)
{
    char cause[128];
    hsize_t dims[1] = {(hsize_t)n};
    hid_t space = H5Screate_simple(1, dims, NULL);
    hid_t a = space < 0 ? -1 : H5Acreate2(obj, attr, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || H5Awrite(a, H5T_NATIVE_INT64, v) < 0
                 ? TRI_ERR(TRI_EIO, "%s: cannot write attribute %s of %s%s", path, attr, obj_name, os_cause(cause))
                 : TRI_OK;
    if (a >= 0)
        H5Aclose(a);
    if (space >= 0)
        H5Sclose(space);
    return rc;
}

int tri_h5_attr_str(hid_t obj, const char *path, const char *obj_name, const char *attr, const char *v)
{
    char cause[128];
    hid_t type = H5Tcopy(H5T_C_S1);
    hid_t space = H5Screate(H5S_SCALAR);
    int rc = TRI_OK;
    if (type < 0 || space < 0 || H5Tset_size(type, strlen(v) + 1) < 0)
        rc = TRI_ERR(TRI_EIO, "%s: cannot write attribute %s of %s%s", path, attr, obj_name, os_cause(cause));
    hid_t a = rc ? -1 : H5Acreate2(obj, attr, type, space, H5P_DEFAULT, H5P_DEFAULT);
    if (!rc && (a < 0 || H5Awrite(a, type, v) < 0))
        rc = TRI_ERR(TRI_EIO, "%s: cannot write attribute %s of %s%s", path, attr, obj_name, os_cause(cause));
    if (a >= 0)
        H5Aclose(a);
    if (space >= 0)
        H5Sclose(space);
    if (type >= 0)
        H5Tclose(type);
    return rc;
}

/* Whether the dataset's creation properties carry the Fletcher32 filter. */
static int has_fletcher32(hid_t ds)
{
    hid_t dcpl = H5Dget_create_plist(ds);
    if (dcpl < 0)
        return 0;
    int found = 0, n = H5Pget_nfilters(dcpl);
    for (int i = 0; i < n && !found; i++) {
        unsigned flags = 0, cd[8];
        size_t ncd = 8;
        char fname[64];
        H5Z_filter_t f = H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cd, sizeof fname, fname, NULL);
        found = f == H5Z_FILTER_FLETCHER32;
    }
    H5Pclose(dcpl);
    return found;
}

int tri_h5_read_f32(hid_t file, const char *path, const char *name, int ndim, const int64_t *shape, float *out)
{
    tri_h5_quiet();
    if (H5Lexists(file, name, H5P_DEFAULT) <= 0)
        return TRI_ERR(TRI_ECORRUPT, "%s: dataset %s is missing", path, name);
    hid_t ds = H5Dopen2(file, name, H5P_DEFAULT);
    if (ds < 0)
        return TRI_ERR(TRI_ECORRUPT, "%s: cannot open dataset %s", path, name);
    hid_t type = H5Dget_type(ds), space = H5Dget_space(ds);
    int rc = TRI_OK;
    if (type < 0 || space < 0) {
        rc = TRI_ERR(TRI_ECORRUPT, "%s: dataset %s has no readable type or dataspace", path, name);
    } else if (H5Tget_class(type) != H5T_FLOAT || H5Tget_size(type) != 4) {
        rc = TRI_ERR(TRI_ECORRUPT, "%s: dataset %s is not float32 (class %d, %zu bytes per element)", path, name,
                     (int)H5Tget_class(type), H5Tget_size(type));
    } else {
        hsize_t dims[H5S_MAX_RANK];
        int rank = H5Sget_simple_extent_ndims(space);
        if (rank != ndim || rank > H5S_MAX_RANK || H5Sget_simple_extent_dims(space, dims, NULL) != rank) {
            rc = TRI_ERR(TRI_ECORRUPT, "%s: dataset %s has %d dimensions; expected %d", path, name, rank, ndim);
        }
        for (int d = 0; d < ndim && !rc; d++)
            if (dims[d] != (hsize_t)shape[d])
                rc = TRI_ERR(TRI_ECORRUPT, "%s: dataset %s has size %llu in dimension %d; expected %lld", path,
                             name, (unsigned long long)dims[d], d, (long long)shape[d]);
    }
    if (!rc && !has_fletcher32(ds))
        rc = TRI_ERR(TRI_ECORRUPT, "%s: dataset %s carries no Fletcher32 checksum", path, name);
    if (!rc && H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
        rc = TRI_ERR(TRI_ECORRUPT, "%s: reading dataset %s failed (Fletcher32 checksum or file damage)", path, name);
    if (space >= 0)
        H5Sclose(space);
    if (type >= 0)
        H5Tclose(type);
    H5Dclose(ds);
    return rc;
}

bool tri_h5_exists(hid_t file, const char *name)
{
    char link[1024];
    size_t len = strlen(name);
    if (len == 0 || len >= sizeof link)
        return false;
    memcpy(link, name, len + 1);
    tri_h5_quiet();
    for (size_t i = 1; i <= len; i++) {
        if (link[i] != '/' && link[i] != '\0')
            continue;
        char c = link[i];
        link[i] = '\0';
        bool there = H5Lexists(file, link, H5P_DEFAULT) > 0;
        link[i] = c;
        if (!there)
            return false;
    }
    return true;
}

int tri_h5_read_attr_i64(hid_t file, const char *path, const char *obj_name, const char *attr, int n, int64_t *v)
{
    tri_h5_quiet();
    if (H5Aexists_by_name(file, obj_name, attr, H5P_DEFAULT) <= 0)
        return TRI_ERR(TRI_ECORRUPT, "%s: %s has no attribute %s", path, obj_name, attr);
    hid_t a = H5Aopen_by_name(file, obj_name, attr, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0)
        return TRI_ERR(TRI_ECORRUPT, "%s: cannot open attribute %s of %s", path, attr, obj_name);
    hid_t type = H5Aget_type(a), space = H5Aget_space(a);
    int rc = TRI_OK;
    hsize_t dims[1] = {0};
    if (type < 0 || space < 0 || H5Tget_class(type) != H5T_INTEGER || H5Tget_size(type) != 8 ||
        H5Sget_simple_extent_ndims(space) != 1 || H5Sget_simple_extent_dims(space, dims, NULL) != 1 ||
        dims[0] != (hsize_t)n)
        rc = TRI_ERR(TRI_ECORRUPT, "%s: attribute %s of %s is not %d int64 values", path, attr, obj_name, n);
    if (!rc && H5Aread(a, H5T_NATIVE_INT64, v) < 0)
        rc = TRI_ERR(TRI_ECORRUPT, "%s: cannot read attribute %s of %s", path, attr, obj_name);
    if (space >= 0)
        H5Sclose(space);
    if (type >= 0)
        H5Tclose(type);
    H5Aclose(a);
    return rc;
}
