/* checkpoints/index.c - the virtual-dataset index of a step (see checkpoint.h).
 *
 * index.h5 holds one HDF5 virtual dataset per tensor, of its full logical shape, mapping each
 * stored TP shard (a dataset of a model file, by relative file name) into its box, so h5py or
 * h5dump see the full, unsharded weights without any conversion. Optimizer pieces are flat ranges
 * of shards, not boxes, and are left out. */
#include <stdio.h>

#include "checkpoints/checkpoint.h"
#include "checkpoints/fsutil.h"
#include "checkpoints/h5.h"
#include "engine/core/status.h"

static int index_tensor(hid_t f, const char *path, const tri_ckpt_manifest *m, int t)
{
    const tri_ckpt_tensor *ten = &m->tensors[t];
    hsize_t dims[H5S_MAX_RANK];
    for (int d = 0; d < ten->ndim; d++)
        dims[d] = (hsize_t)ten->shape[d];
    hid_t vspace = H5Screate_simple(ten->ndim, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    int rc = vspace < 0 || dcpl < 0 ? TRI_ERR(TRI_EIO, "%s: cannot set up virtual dataset %s", path, ten->name)
                                    : TRI_OK;
    char src_name[TRI_PARAM_NAME_MAX + 2];
    snprintf(src_name, sizeof src_name, "/%s", ten->name);
    for (int fi = 0; fi < m->n_files && !rc; fi++) {
        const tri_ckpt_file *file = &m->files[fi];
        for (int k = 0; file->kind == TRI_CKPT_MODEL && k < file->n_pieces && !rc; k++) {
            const tri_ckpt_piece *pc = &file->pieces[k];
            if (pc->tensor != t)
                continue;
            hsize_t off[H5S_MAX_RANK], cnt[H5S_MAX_RANK];
            for (int d = 0; d < ten->ndim; d++) {
                off[d] = (hsize_t)pc->box.off[d];
                cnt[d] = (hsize_t)pc->box.shape[d];
            }
            hid_t sspace = H5Screate_simple(ten->ndim, cnt, NULL);
            if (sspace < 0 || H5Sselect_hyperslab(vspace, H5S_SELECT_SET, off, NULL, cnt, NULL) < 0 ||
                H5Pset_virtual(dcpl, vspace, file->name, src_name, sspace) < 0)
                rc = TRI_ERR(TRI_EIO, "%s: cannot map %s of %s into virtual dataset %s", path, src_name,
                             file->name, ten->name);
            if (sspace >= 0)
                H5Sclose(sspace);
        }
    }
    if (!rc) {
        H5Sselect_all(vspace);
        hid_t ds = H5Dcreate2(f, ten->name, H5T_IEEE_F32LE, vspace, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        if (ds < 0)
            rc = TRI_ERR(TRI_EIO, "%s: cannot create virtual dataset %s", path, ten->name);
        else
            H5Dclose(ds);
    }
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (vspace >= 0)
        H5Sclose(vspace);
    return rc;
}

int tri_ckpt_write_index(const tri_ckpt_manifest *m, const char *dir)
{
    char path[TRI_CKPT_PATH_MAX];
    hid_t f = -1;
    int rc = tri_fs_join(path, sizeof path, dir, TRI_CKPT_INDEX);
    if (!rc) rc = tri_h5_create(path, &f);
    int64_t it = m->iteration;
    if (!rc) rc = tri_h5_attr_str(f, path, "/", "format", TRI_CKPT_FORMAT);
    if (!rc) rc = tri_h5_attr_str(f, path, "/", "kind", "index");
    if (!rc) rc = tri_h5_attr_i64(f, path, "/", "iteration", 1, &it);
    for (int t = 0; t < m->n_tensors && !rc; t++)
        rc = index_tensor(f, path, m, t);
    int crc = f >= 0 ? tri_h5_close(f, path) : TRI_OK;
    if (!rc) rc = crc;
    if (!rc) rc = tri_fs_fsync(path);
    return rc;
}
