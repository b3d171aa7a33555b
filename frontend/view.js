// The standalone `view` page (a shared link): the same dashboard outside
// TensorBoard, opened at the run, host, level and window of its query string.
import {render} from '../index.js';

render();
