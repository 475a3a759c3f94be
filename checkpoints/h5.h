/* checkpoints/h5.h - the HDF5 calls of the checkpoint format, with the checks NOTES.md asks for.
 *
 * Writing: the newest file format (H5F_LIBVER_LATEST), float32 datasets chunked (at most 1 MiB
 * per chunk) with the Fletcher32 filter, int64 attributes. Reading: a dataset's class, size, rank,
 * dimensions and Fletcher32 filter are checked before H5Dread (which would silently convert
 * float64, or overflow a smaller buffer); every error names the file and the dataset. Files are
 * opened only after their SHA-256 was verified against the manifest (checkpoints/reader.h). */
#ifndef TRIDENT_CHECKPOINTS_H5_H
#define TRIDENT_CHECKPOINTS_H5_H

#include <hdf5.h>
#include <stdbool.h>
#include <stdint.h>

/* Silences HDF5's own error printing on this thread (errors come back as statuses). */
void tri_h5_quiet(void);

/* Creates (truncates) path for writing with the newest format. TRI_EIO naming the file. */
int tri_h5_create(const char *path, hid_t *file);
/* Opens path read-only. TRI_ECORRUPT naming the file when libhdf5 refuses it. */
int tri_h5_open(const char *path, hid_t *file);
/* Closes a file (writes pending data). TRI_EIO naming the file. */
int tri_h5_close(hid_t file, const char *path);

/* Writes dataset `name` (parent groups created) of float32 with the given shape from data. */
int tri_h5_write_f32(hid_t file, const char *path, const char *name, int ndim, const int64_t *shape,
                     const float *data, hid_t *dset);
/* Attaches an int64 array attribute (n values) to an object. */
int tri_h5_attr_i64(hid_t obj, const char *path, const char *obj_name, const char *attr, int n, const int64_t *v);
/* Attaches a string attribute. */
int tri_h5_attr_str(hid_t obj, const char *path, const char *obj_name, const char *attr, const char *v);

/* Reads dataset `name` into out after checking it is float32 (IEEE, 4 bytes) of exactly this
 * shape and carries the Fletcher32 filter. TRI_ECORRUPT naming file and dataset otherwise (also
 * when the Fletcher32 check fails during the read). */
int tri_h5_read_f32(hid_t file, const char *path, const char *name, int ndim, const int64_t *shape, float *out);

/* Whether the file holds object `name` ("group/dataset": every link on the way is checked, so an
 * absent group is an answer, not an error). */
bool tri_h5_exists(hid_t file, const char *name);

/* Reads an int64 array attribute of n values, checking its class, size and length. */
int tri_h5_read_attr_i64(hid_t file, const char *path, const char *obj_name, const char *attr, int n, int64_t *v);

#endif
