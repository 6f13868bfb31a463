"""The reference DLRM: data, model, optimizers and trainer."""
