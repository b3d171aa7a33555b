"""The event model: one table of columns every format is read into (`table`), its slices
(`slices`), the orders made over it (`sorting`), and the arrays it keeps in files, mapped
(`mapped`, `read_advice`). Below every other part of the package but the native core."""
