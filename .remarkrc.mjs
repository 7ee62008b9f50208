// `npm run docs:links`: every relative link and #anchor in the Markdown must name a file and a
// heading that exist. Offline: links to other sites are not fetched.
import remarkValidateLinks from 'remark-validate-links';

export default {
  plugins: [[remarkValidateLinks, { repository: false }]],
};
