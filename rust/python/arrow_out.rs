//! Arrow arrays handed to Python through the Arrow PyCapsule interface (`__arrow_c_array__`),
//! which pyarrow, polars and arro3 read without a copy.
//!
//! This is our own small class rather than pyo3-arrow's `PyArray` (still used to *read* Arrow
//! input, `arrow_in.rs`): returning a `PyArray` to Python made its class with every method
//! (cast, take, concat, pretty printing...) reachable, which linked arrow-cast, arrow-select and
//! arrow-ord into the core: its code went from 8.5 to 1.6 MB, the library from 13.7 to 4.6 MB
//! (docs/install.md).

use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::{Array, ArrayRef, RecordBatch, StructArray};
use arrow_schema::{Field, FieldRef};
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyTuple};
use std::sync::Arc;

/// An Arrow array (``__arrow_c_array__``): ``pyarrow.array(x)`` and other Arrow libraries take
/// it without a copy; ``len(x)`` is its length.
#[pyclass(name = "ArrowArray", module = "heartwire._core", frozen)]
pub struct PyArrowArray {
    field: FieldRef,
    array: ArrayRef,
}

impl PyArrowArray {
    /// `array`, described to consumers as a field named `name`.
    pub fn new(name: &str, array: ArrayRef) -> Self {
        let field = Field::new(name, array.data_type().clone(), array.null_count() > 0);
        Self {
            field: Arc::new(field),
            array,
        }
    }

    /// A `pyarrow.Array` of `array` (pyarrow is imported here: the Spark kernels' callers have
    /// it).
    pub fn to_pyarrow<'py>(
        py: Python<'py>,
        name: &str,
        array: ArrayRef,
    ) -> PyResult<Bound<'py, PyAny>> {
        let exported = Bound::new(py, Self::new(name, array))?;
        let pyarrow = py.import(intern!(py, "pyarrow"))?;
        pyarrow.getattr(intern!(py, "array"))?.call1((exported,))
    }

    /// A `pyarrow.RecordBatch` of `batch` (exported as the struct array of its columns, which is
    /// how the C data interface carries a record batch).
    pub fn record_batch_to_pyarrow(
        py: Python<'_>,
        batch: RecordBatch,
    ) -> PyResult<Bound<'_, PyAny>> {
        let exported = Bound::new(py, Self::new("", Arc::new(StructArray::from(batch))))?;
        let pyarrow = py.import(intern!(py, "pyarrow"))?;
        pyarrow
            .getattr(intern!(py, "record_batch"))?
            .call1((exported,))
    }
}

#[pymethods]
impl PyArrowArray {
    /// The Arrow C data interface's (schema, array) capsules. ``requested_schema`` is not acted
    /// on: the interface lets a producer that does not cast hand its own type, and the consumer
    /// casts if it needs another (with pyarrow 26, cast after importing:
    /// ``pyarrow.array(x).cast(t)``; its own fallback for ``pyarrow.array(x, type=t)`` fails).
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let _ = requested_schema;
        let schema = FFI_ArrowSchema::try_from(self.field.as_ref())
            .map_err(|e| PyValueError::new_err(format!("Arrow schema export failed: {e}")))?;
        let array = FFI_ArrowArray::new(&self.array.to_data());
        // Each capsule owns its struct; a consumer moves it out (its release set to null), and
        // the capsule's destructor drops what is left, which releases only what was not moved.
        let schema = PyCapsule::new_with_value(py, schema, c"arrow_schema")?;
        let array = PyCapsule::new_with_value(py, array, c"arrow_array")?;
        PyTuple::new(py, [schema, array])
    }

    fn __len__(&self) -> usize {
        self.array.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "ArrowArray({}, len={})",
            self.array.data_type(),
            self.array.len()
        )
    }
}
